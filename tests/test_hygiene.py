"""The hygiene report: each signal alone and together, healthy stores silent, archived ignored."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from thatch.cli.main import cli
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.hygiene import COUNTED_UP_TO, EngineHygiene, hygiene, hygiene_report

ACTIVE = "test/model-a"
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
DIM = 64


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository ``acme`` with branches main and feature-live."""
    path = tmp_path / "acme"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "init")
    git(path, "branch", "feature-live")
    return path


@pytest.fixture
def vec() -> Callable[[], np.ndarray]:
    rng = np.random.default_rng(7)

    def make() -> np.ndarray:
        v = rng.standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    return make


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "thatch.db", clock=lambda: NOW)
    yield s
    s.close()


def add(
    store: Store, name: str, label: str, vector: object, model: str | None = ACTIVE, **kw: Any
) -> None:
    store.remember(name, label, f"# {label}\n\ntext of {label}", vector, model, **kw)


def test_healthy_store_is_silent(store: Store, repo: Path, vec: Callable[[], np.ndarray]) -> None:
    """Fresh, distinct, current-model memories on live branches: no report."""
    add(store, "acme", "one", vec())
    add(store, "acme", "two", vec(), branch="feature-live")
    add(store, "global", "pref", vec())
    assert hygiene_report(store, "acme", repo, ACTIVE, now=NOW) is None


def test_duplicates_alone(store: Store, repo: Path, vec: Callable[[], np.ndarray]) -> None:
    """Two near-identical memories: two memories with a duplicate candidate."""
    v = vec()
    add(store, "acme", "deploy a", v)
    add(store, "acme", "deploy b", v + 0.01 * vec())
    add(store, "acme", "other", vec())
    assert hygiene_report(store, "acme", repo, ACTIVE, now=NOW) == (
        'Store "acme": 2 memories with duplicate candidates pending review.'
    )


def test_stale_alone_via_clock(tmp_path: Path, repo: Path, vec: Callable[[], np.ndarray]) -> None:
    """Memories written 91 days ago and never recalled are stale; archived ones are not."""
    old = NOW - timedelta(days=91)
    with Store.open(tmp_path / "thatch.db", clock=lambda: old) as past:
        add(past, "acme", "old one", vec())
        add(past, "acme", "old two", vec())
        add(past, "acme", "old archived", vec(), archived=True)
    with Store.open(tmp_path / "thatch.db", clock=lambda: NOW) as store:
        add(store, "acme", "fresh", vec())
        assert hygiene_report(store, "acme", repo, ACTIVE, now=NOW) == (
            'Store "acme": 2 memories neither updated nor recalled in 90+ days.'
        )


def test_deleted_branches_alone(store: Store, repo: Path, vec: Callable[[], np.ndarray]) -> None:
    """Branches missing from git are named; live and archived-only branches are not."""
    add(store, "acme", "live", vec(), branch="feature-live")
    add(store, "acme", "gone 1", vec(), branch="gone-b")
    add(store, "acme", "gone 2", vec(), branch="gone-a")
    add(store, "acme", "gone 3", vec(), branch="gone-a")
    add(store, "acme", "archived gone", vec(), branch="gone-c", archived=True)
    result = hygiene(store, "acme", repo, ACTIVE, now=NOW)
    assert result.report == 'Store "acme": 3 memories scoped to deleted branches (gone-a, gone-b).'
    assert result.as_json()["orphaned"] == {"branches": ["gone-a", "gone-b"], "count": 3}


def test_the_report_names_three_deleted_branches_and_counts_the_rest(
    store: Store, repo: Path, vec: Callable[[], np.ndarray]
) -> None:
    """The report goes before the agent at every session start: 400 deleted branches used
    to be 400 names (36 KB of context). JSON still lists every one."""
    for n in range(400):
        add(store, "acme", f"gone {n}", vec(), branch=f"gone-{n:03d}")
    result = hygiene(store, "acme", repo, ACTIVE, now=NOW)
    assert result.report == (
        'Store "acme": 400 memories scoped to deleted branches '
        "(gone-000, gone-001, gone-002, and 397 more)."
    )
    orphaned = result.as_json()["orphaned"]
    assert isinstance(orphaned, dict) and len(orphaned["branches"]) == 400


def test_deleted_branches_cost_the_same_statements_however_many(
    store: Store, repo: Path, vec: Callable[[], np.ndarray]
) -> None:
    """Every session start counts them: one query for each deleted branch was 400 queries
    (0.5 s of a 1 s budget) for a repository that deleted 400. With 200 deleted branches
    the pass runs exactly the statements it runs with none, and counts them right."""
    branches = [f"gone-{n:03d}" for n in range(200)]
    for n, branch in enumerate(branches):
        add(store, "acme", f"gone {n}", vec(), branch=branch)
        if n % 2:
            add(store, "acme", f"gone {n} again", vec(), branch=branch)
        if n % 5 == 0:  # archived memories are no orphans: a branch of only those is not named
            archived = f"archived-{n:03d}"
            add(store, "acme", f"gone {n} archived", vec(), branch=archived, archived=True)
    add(store, "other", "elsewhere", vec(), branch="gone-other")  # another store's branch

    def statements(live: list[str]) -> tuple[list[str], int, tuple[str, ...]]:
        executed: list[str] = []
        store.conn.set_trace_callback(executed.append)
        try:
            result = hygiene(store, "acme", repo, ACTIVE, now=NOW, list_branches=lambda _: live)
        finally:
            store.conn.set_trace_callback(None)
        return executed, result.project.orphaned, result.project.orphaned_branches

    statements(["main"])  # the first pass's one-time writes (anchor renames, events) done
    archived_only = [f"archived-{n:03d}" for n in range(0, 200, 5)]
    one_deleted = statements(["main", *branches[1:], *archived_only])
    all_deleted = statements(["main"])
    assert one_deleted[1:] == (1, (branches[0],))
    assert all_deleted[1:] == (300, tuple(branches))
    assert len(all_deleted[0]) == len(one_deleted[0])


def test_orphan_check_skipped_outside_git(
    store: Store, tmp_path: Path, vec: Callable[[], np.ndarray]
) -> None:
    """Without a git repository every branch would look deleted, so nothing is reported."""
    plain = tmp_path / "plain"
    plain.mkdir()
    add(store, "plain", "scoped", vec(), branch="feature-x")
    assert hygiene_report(store, "plain", plain, ACTIVE, now=NOW) is None


def test_model_and_pending_alone(store: Store, repo: Path, vec: Callable[[], np.ndarray]) -> None:
    """Other-model and unembedded memories, singular forms."""
    add(store, "acme", "old model", vec(), model="test/model-b")
    add(store, "acme", "pending", None, model=None)
    assert hygiene_report(store, "acme", repo, ACTIVE, now=NOW) == (
        'Store "acme": 1 memory embedded with another model than test/model-a; '
        "1 memory not embedded yet."
    )


def test_all_signals_together_with_global_appended(
    tmp_path: Path, repo: Path, vec: Callable[[], np.ndarray]
) -> None:
    """Every part in order, then global's model/pending parts (not its other parts)."""
    old = NOW - timedelta(days=120)
    with Store.open(tmp_path / "thatch.db", clock=lambda: old) as past:
        add(past, "acme", "stale", vec())
        add(past, "global", "stale global", vec())  # global's staleness is not appended
    with Store.open(tmp_path / "thatch.db", clock=lambda: NOW) as store:
        v = vec()
        add(store, "acme", "dup a", v)
        add(store, "acme", "dup b", v)
        add(store, "acme", "orphan", vec(), branch="gone")
        add(store, "acme", "m1", vec(), model="test/model-b")
        add(store, "acme", "m2", vec(), model="test/model-c")
        add(store, "acme", "p1", None)
        add(store, "acme", "p2", None, archived=True)  # pending counts archived too
        add(store, "global", "g other", vec(), model="test/model-b")
        add(store, "global", "g pending", None)
        result = hygiene(store, "acme", repo, ACTIVE, now=NOW)
        # ``thatch hygiene --json``'s counts are exact (the session start's stop at a cap,
        # and with every memory checked do not count the check's progress).
        exact = hygiene(store, "acme", repo, ACTIVE, now=NOW, up_to=None)
    assert exact.report == result.report
    assert result.report == (
        'Store "acme": 2 memories with duplicate candidates pending review; '
        "1 memory neither updated nor recalled in 90+ days; "
        "1 memory scoped to deleted branches (gone); "
        "2 memories embedded with another model than test/model-a; "
        '2 memories not embedded yet. Store "global": 1 memory embedded with another model '
        "than test/model-a; 1 memory not embedded yet."
    )
    assert exact.as_json() == {
        "store": "acme",
        "report": result.report,
        "duplicates": 2,
        "duplicates_more": False,
        "duplicates_checked": {"checked": 6, "total": 6},
        "stale": 1,
        "orphaned": {"branches": ["gone"], "count": 1},
        "other_model": 2,
        "pending": 2,
        "code_changed": 0,
        "code_anchors_unread": False,
        "conflicts": 0,
        "engines": {"other_model": 0, "pending": 0},
    }


def test_cli_names_the_pairs_stale_memories_and_branches_it_counts(
    cli_env: Path, vec: Callable[[], np.ndarray]
) -> None:
    """Counts come with what they count, so a person can act on them (issue 12 §4)."""
    same = vec()
    old = datetime.now(UTC) - timedelta(days=200)
    with Store.open(cli_env, clock=lambda: old) as store:
        add(store, "acme", "Dup one", same)
        add(store, "acme", "Dup two", same)
        add(store, "acme", "On gone", vec(), branch="gone-branch")
    result = CliRunner().invoke(cli, ["hygiene"], catch_exceptions=False)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        'Store "acme": 2 memories with duplicate candidates pending review; 3 memories'
    )
    assert lines[1:] == [
        'Duplicate candidates in "acme" (thatch dedup to review):',
        '  [score:1.000] "Dup one" ↔ "Dup two"',
        'Stale in "acme" (neither updated nor recalled in 90+ days):',
        '  "Dup one"',
        '  "Dup two"',
        '  "On gone"',
        'Scoped to deleted branches in "acme":',
        '  "On gone" (branch:gone-branch)',
    ]
    document = json.loads(CliRunner().invoke(cli, ["hygiene", "--json"]).stdout)
    assert document["duplicate_pairs"] == [
        {"label_a": "Dup one", "label_b": "Dup two", "score": 1.0}
    ]
    assert document["stale_labels"] == ["Dup one", "Dup two", "On gone"]
    assert document["orphaned_memories"] == [{"label": "On gone", "branch": "gone-branch"}]


def test_cli_fills_pending_memories_when_an_embedder_serves(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: object
) -> None:
    """A memory saved while the embedder was down is embedded by the next frontend that
    reaches it: hygiene does not report it "not embedded yet" while one is serving."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)  # type: ignore[attr-defined]
    monkeypatch.setenv("THATCH_MODEL", "mock")
    with Store.open(cli_env) as store:
        add(store, "acme", "Saved offline", None, model=None)
        assert store.pending_count("acme") == 1
    result = CliRunner().invoke(cli, ["hygiene"], catch_exceptions=False)
    assert (result.exit_code, result.stdout) == (0, "Store is healthy.\n")
    with Store.open(cli_env) as store:
        assert store.pending_count("acme") == 0


def test_cli_asks_whether_any_is_pending_before_it_fills(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: object
) -> None:
    """Before the report, ``thatch hygiene`` asks whether anything in any store waits for
    an embedding: one row read (``up_to=0``), not a count of the whole backlog (the
    report's own counts stay exact)."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)  # type: ignore[attr-defined]
    monkeypatch.setenv("THATCH_MODEL", "mock")
    with Store.open(cli_env) as store:
        add(store, "acme", "Saved offline", None, model=None)
    asked: list[tuple[str | None, int | None]] = []
    counted = Store.pending_count

    def spy(store: Store, name: str | None = None, *, up_to: int | None = None) -> int:
        asked.append((name, up_to))
        return counted(store, name, up_to=up_to)

    monkeypatch.setattr(Store, "pending_count", spy)
    result = CliRunner().invoke(cli, ["hygiene"], catch_exceptions=False)
    assert (result.exit_code, result.stdout) == (0, "Store is healthy.\n")
    assert [up_to for name, up_to in asked if name is None] == [0], asked
    assert ("acme", None) in asked  # the report's count, exact


def test_global_project_store_reports_once(store: Store, tmp_path: Path) -> None:
    """When the project store is global its parts appear once, not appended again."""
    add(store, "global", "p", None)
    assert hygiene_report(store, "global", tmp_path, ACTIVE, now=NOW) == (
        'Store "global": 1 memory not embedded yet.'
    )


def test_archived_excluded_from_duplicates_and_model(
    store: Store, repo: Path, vec: Callable[[], np.ndarray]
) -> None:
    """Archived memories never count as duplicates or other-model memories."""
    v = vec()
    add(store, "acme", "live", v)
    add(store, "acme", "archived twin", v, archived=True)
    add(store, "acme", "archived old model", vec(), model="test/model-b", archived=True)
    assert hygiene_report(store, "acme", repo, ACTIVE, now=NOW) is None


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, repo: Path) -> Path:
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(repo))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "127.0.0.1:1")
    monkeypatch.setenv("THATCH_MODEL", ACTIVE)
    return tmp_path / "thatch.db"


def test_cli_healthy_and_json(cli_env: Path, vec: Callable[[], np.ndarray]) -> None:
    """`thatch hygiene` prints "Store is healthy." (exit 0) and JSON with a null report."""
    runner = CliRunner()
    result = runner.invoke(cli, ["hygiene"], catch_exceptions=False)
    assert (result.exit_code, result.stdout) == (0, "Store is healthy.\n")
    result = runner.invoke(cli, ["hygiene", "--json"], catch_exceptions=False)
    assert json.loads(result.stdout) == {
        "store": "acme",
        "report": None,
        "duplicates": 0,
        "duplicates_more": False,
        "duplicates_checked": {"checked": 0, "total": 0},
        "stale": 0,
        "orphaned": {"branches": [], "count": 0},
        "other_model": 0,
        "pending": 0,
        "code_changed": 0,
        "code_anchors_unread": False,
        "conflicts": 0,
        "engines": {"other_model": 0, "pending": 0},
        "duplicate_pairs": [],
        "stale_labels": [],
        "orphaned_memories": [],
        "code_changed_memories": [],
        "conflict_versions": [],
    }


def test_cli_report_uses_configured_model(cli_env: Path, vec: Callable[[], np.ndarray]) -> None:
    """Without an embedder the configured model is the active one; the report prints as is."""
    with Store.open(cli_env) as store:
        add(store, "acme", "m", vec(), model="test/model-b")
    result = CliRunner().invoke(cli, ["hygiene"], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout == (
        'Store "acme": 1 memory embedded with another model than test/model-a.\n'
    )
    assert json.loads(CliRunner().invoke(cli, ["hygiene", "--json"]).stdout)["other_model"] == 1


@pytest.mark.parametrize("configured", ["bge-small-en-v1.5", "Xenova/bge-small-en-v1.5@main"])
def test_cli_compares_with_the_id_the_configured_model_resolves_to(
    cli_env: Path,
    vec: Callable[[], np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
    configured: str,
) -> None:
    """A short name or a pinned revision names the same model: no other-model alarm."""
    monkeypatch.setenv("THATCH_MODEL", configured)
    with Store.open(cli_env) as store:
        add(store, "acme", "m", vec(), model="Xenova/bge-small-en-v1.5")
    result = CliRunner().invoke(cli, ["hygiene"], catch_exceptions=False)
    assert (result.exit_code, result.stdout) == (0, "Store is healthy.\n")


def test_cli_compares_with_a_model_directory_id(
    cli_env: Path, vec: Callable[[], np.ndarray], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """THATCH_MODEL as a directory: its thatch_model.json id is the active model."""
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    (model_dir / "thatch_model.json").write_text(json.dumps({"model_id": "acme/minilm"}))
    monkeypatch.setenv("THATCH_MODEL", str(model_dir))
    with Store.open(cli_env) as store:
        add(store, "acme", "ok", vec(), model="acme/minilm")
        add(store, "acme", "old", vec(), model=str(model_dir))
    result = CliRunner().invoke(cli, ["hygiene"], catch_exceptions=False)
    assert result.stdout == (
        'Store "acme": 1 memory embedded with another model than acme/minilm.\n'
    )


def test_engine_rows_of_another_model_or_none_are_counted(
    store: Store, tmp_path: Path, vec: Callable[[], np.ndarray]
) -> None:
    """Matchers and items of both engines, every store: other model and not embedded."""
    from thatch.frontend.store.engine_store import BEHAVIORS, PREDICTIONS, EngineStore

    for engine, model in ((PREDICTIONS, "test/model-b"), (BEHAVIORS, ACTIVE)):
        EngineStore(store.conn, engine, lock=store.lock).record(
            "elsewhere",
            matcher="m",
            matcher_vector=vec(),
            statement="s",
            statement_vector=vec(),
            model=model,
            signal=engine.creation_signal,
            rationale="r",
        )
    store.conn.execute("UPDATE behaviors SET embedding = NULL")
    result = hygiene(store, "global", tmp_path, ACTIVE, now=NOW)
    assert result.report == (
        "Engine rows (predictions, behaviors): 2 embedded with another model than "
        "test/model-a; 1 not embedded yet."
    )
    assert result.as_json()["engines"] == {"other_model": 2, "pending": 1}


def test_cli_syncs_branches_before_it_counts(cli_env: Path, repo: Path) -> None:
    """``thatch hygiene`` follows git first, as a session start does: a branch deleted
    unmerged since the last sync has its memories archived, not counted as orphaned."""
    git(repo, "checkout", "-q", "-b", "spike")
    (repo / "spike.txt").write_text("spike\n")
    git(repo, "add", "spike.txt")
    git(repo, "commit", "-q", "-m", "spike work")
    git(repo, "checkout", "-q", "main")
    with Store.open(cli_env) as store:
        add(store, "acme", "Spike idea", None, None, branch="spike")
    runner = CliRunner()
    first = json.loads(runner.invoke(cli, ["hygiene", "--json"], catch_exceptions=False).stdout)
    assert first["orphaned"] == {"branches": [], "count": 0}  # spike exists: nothing to do
    git(repo, "branch", "-q", "-D", "spike")
    after = json.loads(runner.invoke(cli, ["hygiene", "--json"], catch_exceptions=False).stdout)
    assert after["orphaned"] == {"branches": [], "count": 0}
    with Store.open(cli_env) as store:
        assert [(m.label, m.branch, m.archived) for m in store.list("acme")] == [
            ("Spike idea", "spike", True)
        ]


def test_counts_stop_one_row_past_up_to(tmp_path: Path, vec: Callable[[], np.ndarray]) -> None:
    """A count given ``up_to`` reads at most one row past it (that row says "more");
    without it, every row. ``up_to=0`` asks whether there is any."""
    old = NOW - timedelta(days=91)
    with Store.open(tmp_path / "thatch.db", clock=lambda: old) as past:
        for n in range(3):
            add(past, "acme", f"stale {n}", None, model=None)
            add(past, "acme", f"other {n}", vec(), model="test/model-b")
    with Store.open(tmp_path / "thatch.db", clock=lambda: NOW) as store:
        assert [store.stale_count("acme", NOW, up_to=n) for n in (None, 1, 5)] == [6, 2, 6]
        assert [store.model_mismatch_count("acme", ACTIVE, up_to=n) for n in (None, 2, 3)] == [
            3,
            3,
            3,
        ]
        assert [store.pending_count(up_to=n) for n in (None, 0, 1)] == [3, 1, 2]
        assert store.pending_count_in(["acme", "other"], up_to=2) == 3


STALE, FRESH = "2025-01-01T00:00:00.000Z", "2025-06-01T00:00:00.000Z"


def fill_to(path: Path, n: int) -> None:
    """Up to ``n`` memories in each count the session start takes, inserted directly (as a
    big store holds them): in acme stale, not embedded, and conflict versions team sync
    kept (of an original since forgotten); in global embedded with another model."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        (have,) = conn.execute("SELECT count(*) FROM entries WHERE store = 'acme'").fetchone()
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, model, created_at, "
            "updated_at) VALUES (?1, ?2, ?3, 'x', ?4, ?5, ?6, ?6)",
            [
                row
                for i in range(have, n)
                for row in (
                    (f"m{i:05d}", "acme", f"m{i:05d}", None, None, STALE),
                    (f"g{i:05d}", "global", f"g{i:05d}", bytes(16), "test/model-b", FRESH),
                )
            ],
        )
        conn.execute(
            "INSERT OR IGNORE INTO team_conflict_versions (store, slug, conflict_of) "
            "SELECT store, slug, 'gone' FROM entries WHERE store = 'acme'"
        )


def test_session_start_counts_stop_past_the_cap_and_thatch_hygiene_counts_all(
    cli_env: Path, repo: Path
) -> None:
    """Each count the session start shows read every row it counted (13-25 ms each at
    100k memories, at every session start): they stop past COUNTED_UP_TO and say "more
    than", as the duplicate count does; a store at the cap still reads exactly.
    ``thatch hygiene``, a command someone ran, counts exactly."""
    Store.open(cli_env).close()
    fill_to(cli_env, COUNTED_UP_TO)
    cap = COUNTED_UP_TO
    with Store.open(cli_env, clock=lambda: NOW) as store:
        assert hygiene_report(store, "acme", repo, ACTIVE, now=NOW) == (
            f'Store "acme": {cap} memories neither updated nor recalled in 90+ days; {cap} '
            f'conflict versions from team sync ("m00000" and {cap - 1} more; merge each into '
            f"its original, then forget it); {cap} memories not embedded yet. "
            f'Store "global": {cap} memories embedded with another model than test/model-a.'
        )
    fill_to(cli_env, COUNTED_UP_TO + 1)
    with Store.open(cli_env, clock=lambda: NOW) as store:
        result = hygiene(store, "acme", repo, ACTIVE, now=NOW)
    assert result.report == (
        f'Store "acme": more than {cap} memories neither updated nor recalled in 90+ days; '
        f'more than {cap} conflict versions from team sync ("m00000" and others; merge each '
        f"into its original, then forget it); more than {cap} memories not embedded yet. "
        f'Store "global": more than {cap} memories embedded with another model than '
        "test/model-a."
    )
    assert (result.project.stale, result.project.stale_more) == (cap, True)
    document = json.loads(
        CliRunner().invoke(cli, ["hygiene", "--json"], catch_exceptions=False).stdout
    )
    counted = {key: document[key] for key in ("stale", "pending", "conflicts", "other_model")}
    assert counted == {"stale": cap + 1, "pending": cap + 1, "conflicts": cap + 1, "other_model": 0}
    assert document["report"].startswith(
        f'Store "acme": {cap + 1} memories neither updated nor recalled in 90+ days; '
        f'{cap + 1} conflict versions from team sync ("m00000" and {cap} more; '
    )
    assert len(document["stale_labels"]) == cap + 1


def engine_rows(store: Store, table: str, n: int, model: str | None, blob: bytes | None) -> None:
    """``n`` rows of an engine table, inserted directly (as a big store holds them)."""
    column = "description" if table.endswith("matchers") else "statement"
    (have,) = store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    with store.conn:
        store.conn.execute("INSERT OR IGNORE INTO stores (name) VALUES ('global')")
        store.conn.executemany(
            f"INSERT INTO {table} (id, store, {column}, embedding, model, created_at, "
            "updated_at) VALUES (?, 'global', 'x', ?, ?, ?, ?)",
            [(f"{table}-{i}", blob, model, STALE, STALE) for i in range(have, have + n)],
        )


def test_engine_counts_stop_past_up_to_and_read_only_what_they_count(tmp_path: Path) -> None:
    """The session start's engine counts stop past its cap ("more than") and read only the
    rows they count (m032's indexes): healthy rows, however many, are never read; without
    ``up_to`` (``thatch hygiene``) every row is counted."""

    def instructions(n: int) -> tuple[int, EngineHygiene]:
        with Store.open(tmp_path / f"{n}.db") as store:
            for table in ("prediction_matchers", "predictions", "behaviors"):
                engine_rows(store, table, n, ACTIVE, bytes(16))
            EngineHygiene.of(store, ACTIVE, 3)  # caches warmed
            ran = [0]

            def count() -> int:
                ran[0] += 1
                return 0

            store.conn.set_progress_handler(count, 1)
            counted = EngineHygiene.of(store, ACTIVE, 3)
            store.conn.set_progress_handler(None, 1)
            return ran[0], counted

    few, healthy_few = instructions(20)
    many, healthy_many = instructions(400)
    assert healthy_few == healthy_many == EngineHygiene(active_model=ACTIVE)
    assert few == many
    with Store.open(tmp_path / "400.db") as store:
        engine_rows(store, "predictions", 2, "test/model-b", bytes(16))  # above the active
        engine_rows(store, "behaviors", 1, "a/model", bytes(16))  # below it
        engine_rows(store, "behavior_matchers", 1, None, bytes(16))  # no model
        engine_rows(store, "prediction_matchers", 3, None, None)
        assert EngineHygiene.of(store, ACTIVE, 4) == EngineHygiene(4, 3, ACTIVE)
        capped = EngineHygiene.of(store, ACTIVE, 2)
        assert capped == EngineHygiene(2, 2, ACTIVE, True, True)
        assert capped.sentence() == (
            "Engine rows (predictions, behaviors): more than 2 embedded with another model "
            "than test/model-a; more than 2 not embedded yet."
        )
        assert EngineHygiene.of(store, ACTIVE) == EngineHygiene(4, 3, ACTIVE)


def test_session_start_counts_are_exact_in_a_file_without_m031_and_m032(
    tmp_path: Path,
) -> None:
    """A hook's open (``build_indexes=False``) leaves m031's table and m032's indexes to a
    later open: there the session start's duplicate progress and engine counts are the
    exact counts of every row (naming the table or the indexes would fail: "no such
    table", "no such index"); the next open that builds them gives the same answers."""
    from tests.support import earlier_release
    from thatch.frontend.store.migrations.duplicates import DUP_UNCHECKED_TABLE
    from thatch.frontend.store.migrations.engines import ENGINE_EMBEDDED_TABLES, engine_model_index

    path = tmp_path / "earlier.db"
    earlier_release.build(path, 24, legacy=False)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET embedding = NULL WHERE rowid = 2")  # in acme/app
    conn.close()
    name = earlier_release.STORES[1]
    indexes = [engine_model_index(table) for table in ENGINE_EMBEDDED_TABLES]

    def made(store: Store) -> set[str]:
        return {
            row[0]
            for row in store.conn.execute("SELECT name FROM sqlite_master")
            if row[0] == DUP_UNCHECKED_TABLE or row[0] in indexes
        }

    def counts(store: Store) -> None:
        summary = store.duplicate_summary(name, up_to=COUNTED_UP_TO)
        assert (summary.checked, summary.total) == (2, 5)
        assert summary == store.duplicate_summary(name)
        assert EngineHygiene.of(store, ACTIVE, COUNTED_UP_TO) == EngineHygiene(4, 3, ACTIVE)
        assert EngineHygiene.of(store, ACTIVE, 2) == EngineHygiene(2, 2, ACTIVE, True, True)
        assert EngineHygiene.of(store, ACTIVE) == EngineHygiene(4, 3, ACTIVE)

    with Store.open(path, build_indexes=False) as hook:
        assert made(hook) == set()
        hook.check_duplicates(name, limit=2)
        engine_rows(hook, "predictions", 2, "test/model-b", bytes(16))
        engine_rows(hook, "behaviors", 1, "a/model", bytes(16))
        engine_rows(hook, "behavior_matchers", 1, None, bytes(16))
        engine_rows(hook, "prediction_matchers", 3, None, None)
        counts(hook)
        # Without m031's table, whatever ``up_to``: the exact counts (2 of 5 checked).
        assert hook.duplicate_summary(name, up_to=2) == hook.duplicate_summary(name)
    with Store.open(path) as server:
        assert made(server) == {DUP_UNCHECKED_TABLE, *indexes}
        counts(server)
