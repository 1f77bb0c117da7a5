"""Branch memory follows git (docs/database.md §branch-lifecycle), on real git repositories
and a real SQLite file: a branch merged by fast-forward, merge commit, squash or rebase and
then deleted has its memories promoted to project-wide (``origin_branch`` kept); one
deleted unmerged has them archived, and ``restore_branch`` undoes that; worktrees share one
snapshot; a merge seen only on the remote (fetch --prune) promotes too."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest

from thatch.frontend import git_refs
from thatch.frontend.branch_sync import (
    NothingToRestoreError,
    fingerprint_file,
    prompt_sync,
    restore_branch,
    session_sync,
    sync_branches,
)
from thatch.frontend.store.branch_lifecycle import BranchRecords, opened_records
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.migrations.branches import BRANCH_RENAMES_TABLE
from thatch.frontend.store.schema import MIGRATIONS_TABLE

PROJECT = "acme/widgets"


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    result = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()


def commit(repo: Path, name: str, text: str) -> None:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"{name}: {text.strip()}")


def new_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit(path, "README.md", "widgets\n")
    return path


def feature(repo: Path, branch: str, files: int = 2) -> None:
    """``branch`` with ``files`` commits of its own, then back on main."""
    git(repo, "checkout", "-q", "-b", branch)
    for i in range(files):
        commit(repo, f"{branch}-{i}.txt", f"{branch} work {i}\n")
    git(repo, "checkout", "-q", "main")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "thatch.db")
    try:
        yield opened
    finally:
        opened.close()


def save(store: Store, label: str, branch: str | None) -> None:
    store.remember(PROJECT, label, f"# {label}\n\nbody", None, None, branch=branch)


def rows(store: Store) -> dict[str, tuple[str | None, bool]]:
    return {m.label: (m.branch, m.archived) for m in store.list(PROJECT)}


class Clock:
    """The syncs' milliseconds: the store's real clock, always moving on (restore compares
    the archive's time with the memories' ``updated_at``)."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        self.ms = max(self.ms + 1, time.time_ns() // 10**6)
        return self.ms


def sync(store: Store, directory: Path, clock: Clock) -> dict[str, str]:
    result = sync_branches(store, PROJECT, directory, clock())
    assert result is not None
    return {change.branch: change.action for change in result.changes}


def merge_ff(repo: Path, branch: str) -> None:
    git(repo, "merge", "-q", "--ff-only", branch)


def merge_commit(repo: Path, branch: str) -> None:
    commit(repo, "main.txt", "main moved on\n")
    git(repo, "merge", "-q", "--no-ff", "-m", f"merge {branch}", branch)


def merge_squash(repo: Path, branch: str) -> None:
    commit(repo, "main.txt", "main moved on\n")
    git(repo, "merge", "-q", "--squash", branch)
    git(repo, "commit", "-q", "-m", f"squash {branch}")


def merge_rebase(repo: Path, branch: str) -> None:
    """What a host's "rebase and merge" leaves: the branch's commits replayed on main as
    new commits; the branch's own commits are in no ancestry of main."""
    commit(repo, "main.txt", "main moved on\n")
    for sha in git(repo, "rev-list", "--reverse", f"main..{branch}").split():
        git(repo, "cherry-pick", sha)


@pytest.mark.parametrize("merge", [merge_ff, merge_commit, merge_squash, merge_rebase])
def test_a_merged_then_deleted_branch_has_its_memories_promoted(
    tmp_path: Path, store: Store, merge: object
) -> None:
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "feat")
    feature(repo, "other")
    save(store, "Parser plan", "feat")
    save(store, "Parser notes", "feat")
    save(store, "Other plan", "other")
    save(store, "Everyone", None)
    clock = Clock()
    assert sync(store, repo, clock) == {}  # the first sync only stores the snapshot
    assert callable(merge)
    merge(repo, "feat")
    git(repo, "branch", "-q", "-D", "feat")
    assert sync(store, repo, clock) == {"feat": "promoted"}
    assert rows(store) == {
        "Parser plan": (None, False),
        "Parser notes": (None, False),
        "Other plan": ("other", False),
        "Everyone": (None, False),
    }
    records = BranchRecords(store.tx)
    assert records.origin_branch(PROJECT, "parser-plan") == "feat"
    assert records.origin_branch(PROJECT, "everyone") is None
    assert sync(store, repo, clock) == {}  # done once


def test_a_branch_deleted_unmerged_is_archived_and_restorable(tmp_path: Path, store: Store) -> None:
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "spike")
    feature(repo, "kept")
    save(store, "Spike idea", "spike")
    save(store, "Kept idea", "kept")
    clock = Clock()
    sync(store, repo, clock)
    merge_squash(repo, "kept")  # merged, not deleted: still a branch, left as it is
    git(repo, "branch", "-q", "-D", "spike")
    assert sync(store, repo, clock) == {"spike": "archived"}
    assert rows(store) == {"Spike idea": ("spike", True), "Kept idea": ("kept", False)}
    assert restore_branch(store, PROJECT, "spike", clock()).restored == 1
    assert rows(store)["Spike idea"] == ("spike", False)
    assert sync(store, repo, clock) == {}  # the gone branch is not archived again
    with pytest.raises(NothingToRestoreError, match='branch "spike"'):
        restore_branch(store, PROJECT, "spike", clock())


def test_restore_names_the_branches_that_can_be_restored(tmp_path: Path, store: Store) -> None:
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "spike")
    save(store, "Spike idea", "spike")
    clock = Clock()
    sync(store, repo, clock)
    git(repo, "branch", "-q", "-D", "spike")
    sync(store, repo, clock)
    with pytest.raises(NothingToRestoreError, match="Archived branches: spike"):
        restore_branch(store, PROJECT, "spkie", clock())


def test_branches_the_snapshot_never_saw_are_left_alone(tmp_path: Path, store: Store) -> None:
    """Memories of a branch this clone never had (another clone's, or older than the first
    sync) are not guessed about: hygiene keeps reporting them."""
    repo = new_repo(tmp_path / "widgets")
    save(store, "From elsewhere", "elsewhere")
    clock = Clock()
    sync(store, repo, clock)
    commit(repo, "x.txt", "x\n")
    assert sync(store, repo, clock) == {}
    assert rows(store) == {"From elsewhere": ("elsewhere", False)}


def test_worktrees_share_one_snapshot(tmp_path: Path, store: Store) -> None:
    repo = new_repo(tmp_path / "widgets")
    tree = tmp_path / "feat-tree"
    git(repo, "worktree", "add", "-q", "-b", "feat", str(tree))
    commit(tree, "feat.txt", "feat work\n")
    save(store, "Feat plan", "feat")
    clock = Clock()
    sync(store, tree, clock)  # first seen from the worktree
    assert git_refs.common_dir(tree) == git_refs.common_dir(repo) == repo / ".git"
    merge_ff(repo, "feat")
    git(repo, "worktree", "remove", str(tree))
    git(repo, "branch", "-q", "-d", "feat")
    assert sync(store, repo, clock) == {"feat": "promoted"}
    assert rows(store) == {"Feat plan": (None, False)}


def pushed_feat_and_wip(tmp_path: Path, store: Store) -> tuple[Path, Path, Clock]:
    """A clone of a bare origin with branches feat and wip pushed, a memory on each, and
    one sync seen: (origin, the clone, the sync clock)."""
    seed = new_repo(tmp_path / "seed")
    remote = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(remote))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    feature(work, "feat")
    feature(work, "wip")
    git(work, "push", "-q", "-u", "origin", "feat", "wip")
    save(store, "Feat plan", "feat")
    save(store, "Wip plan", "wip")
    clock = Clock()
    sync(store, work, clock)
    return remote, work, clock


def test_a_merge_seen_only_on_the_remote_promotes_after_fetch_prune(
    tmp_path: Path, store: Store
) -> None:
    remote, work, clock = pushed_feat_and_wip(tmp_path, store)
    host = tmp_path / "host"  # the hosting service: squash-merges feat, deletes both
    git(tmp_path, "clone", "-q", str(remote), str(host))
    git(host, "merge", "-q", "--squash", "origin/feat")
    git(host, "commit", "-q", "-m", "squash feat")
    git(host, "push", "-q", "origin", "main", ":feat", ":wip")
    git(work, "fetch", "-q", "--prune")
    assert git(work, "branch", "--list", "feat")  # the local branch is still there
    assert sync(store, work, clock) == {"feat": "promoted"}
    assert rows(store) == {"Feat plan": (None, False), "Wip plan": ("wip", False)}


def logged_git(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose ``git`` logs each call's subcommand, and that log."""
    found = shutil.which("git")
    assert found is not None
    bin_dir, log = tmp_path / "logged-bin", tmp_path / "git-calls"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{log}"\nexec "{found}" "$@"\n')
    wrapper.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, log


def test_a_sync_asks_git_once_per_decision_and_merges_a_target_commit_once(
    tmp_path: Path, store: Store
) -> None:
    """Ancestry over every target in one call; a squash check only when that fails, once
    per distinct commit of the targets (main and origin/main at one commit: one merge),
    the targets' trees read with the refs."""
    seed = new_repo(tmp_path / "seed")
    remote = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(remote))
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    feature(work, "done")
    feature(work, "spike")
    save(store, "Done plan", "done")
    save(store, "Spike idea", "spike")
    clock = Clock()
    sync(store, work, clock)
    git(work, "merge", "-q", "--no-ff", "-m", "merge done", "done")
    git(work, "push", "-q", "origin", "main")
    git(work, "branch", "-q", "-d", "done")
    git(work, "branch", "-q", "-D", "spike")
    env, log = logged_git(tmp_path)
    result = sync_branches(store, PROJECT, work, clock(), env)
    assert result is not None
    assert {c.branch: c.action for c in result.changes} == {
        "done": "promoted",
        "spike": "archived",
    }
    calls = log.read_text().split()
    # the refs read from files; done's ancestry (found); spike's ancestry (not found), its
    # targets' trees, and one merge (main and origin/main are at one commit)
    assert sorted(calls) == ["for-each-ref", "for-each-ref", "for-each-ref", "merge-tree"]


def test_the_refs_read_from_files_are_what_git_lists(tmp_path: Path, store: Store) -> None:
    """Loose refs over packed ones, symbolic refs (origin/HEAD) as their target, a packed
    ref deleted, another moved after packing: as ``git for-each-ref`` says."""
    _remote, work, _clock = pushed_feat_and_wip(tmp_path, store)
    feature(work, "spike")
    git(work, "pack-refs", "--all")
    feature(work, "late")  # loose only
    git(work, "branch", "-q", "-D", "wip")  # was packed
    git(work, "checkout", "-q", "feat")
    commit(work, "f.txt", "moved after packing\n")
    git(work, "checkout", "-q", "main")
    common = git_refs.common_dir(work)
    assert common is not None
    from_files = git_refs.refs_from_files(common)
    from_git = git_refs.read_refs(work, {**os.environ, "PATH": str(tmp_path / "none")})
    assert from_git == from_files  # no git to run: read_refs reads the files
    listed = git(work, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads",
                 "refs/remotes")  # fmt: skip
    expected = dict(line.split(" ")[::-1] for line in listed.splitlines())
    del expected["refs/remotes/origin/HEAD"]
    assert from_files is not None and from_files.commits == expected
    assert from_files.origin_head == "refs/remotes/origin/main"
    assert "refs/heads/wip" not in from_files.commits


def test_a_fifo_among_the_refs_sends_the_read_to_git(tmp_path: Path, store: Store) -> None:
    """Opening a FIFO without a writer waits forever: the prompt hook reading the refs
    would hang for good. It is not a ref file: the answer is None at once, and the caller
    asks git, whose every call here has a timeout."""
    _remote, work, _clock = pushed_feat_and_wip(tmp_path, store)
    common = git_refs.common_dir(work)
    assert common is not None
    os.mkfifo(common / "refs" / "heads" / "stuck")
    assert git_refs.refs_from_files(common) is None
    (common / "refs" / "heads" / "stuck").unlink()
    (common / "packed-refs").unlink(missing_ok=True)
    os.mkfifo(common / "packed-refs")
    assert git_refs.refs_from_files(common) is None


def test_without_git_a_sync_decides_nothing_and_the_next_one_does(
    tmp_path: Path, store: Store
) -> None:
    """Refs come from files, but whether a gone branch was merged needs git: with none to
    run nothing is archived, and the snapshot keeps the branch for the next sync."""
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "spike")
    save(store, "Spike idea", "spike")
    clock = Clock()
    sync(store, repo, clock)
    git(repo, "branch", "-q", "-D", "spike")
    no_git = {**os.environ, "PATH": str(tmp_path / "no-such-bin")}
    result = sync_branches(store, PROJECT, repo, clock(), no_git)
    assert result is not None and result.changes == []
    assert rows(store) == {"Spike idea": ("spike", False)}
    assert sync(store, repo, clock) == {"spike": "archived"}


def test_the_default_branch_is_origin_head_then_main_then_master() -> None:
    refs = git_refs.Refs(
        {"refs/heads/main": "a", "refs/heads/trunk": "b", "refs/remotes/origin/trunk": "c"},
        "refs/remotes/origin/trunk",
    )
    assert git_refs.default_targets(refs, "main") == [
        "refs/heads/trunk",
        "refs/remotes/origin/trunk",
    ]
    refs = git_refs.Refs({"refs/heads/master": "a", "refs/heads/x": "b"}, None)
    assert git_refs.default_targets(refs, "x") == ["refs/heads/master"]
    refs = git_refs.Refs({"refs/heads/dev": "a"}, None)
    assert git_refs.default_targets(refs, "dev") == ["refs/heads/dev"]


def test_the_prompt_check_runs_git_only_after_the_refs_changed(
    tmp_path: Path, store: Store
) -> None:
    repo = new_repo(tmp_path / "widgets")
    tree = tmp_path / "tree"
    git(repo, "worktree", "add", "-q", "-b", "spike", str(tree))
    commit(tree, "s.txt", "spike\n")
    save(store, "Spike idea", "spike")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "THATCH_DB_PATH": str(tmp_path / "x.db")}
    clock = Clock()
    opened: list[int] = []

    def open_store() -> AbstractContextManager[Store]:
        opened.append(1)
        return nullcontext(store)

    def check() -> object:
        return prompt_sync(PROJECT, tree, env, open_store, clock())

    assert session_sync(store, PROJECT, tree, env, clock()) is not None
    commit(tree, "s2.txt", "more\n")  # a commit moves a ref: the fingerprint changes
    check()
    assert len(opened) == 1
    check()
    assert len(opened) == 1  # unchanged refs: no store, no git
    git(repo, "worktree", "remove", "--force", str(tree))
    git(repo, "branch", "-q", "-D", "spike")
    result = prompt_sync(PROJECT, repo, env, open_store, clock())
    assert len(opened) == 2
    assert result is not None and [c.action for c in result.changes] == ["archived"]
    assert rows(store) == {"Spike idea": ("spike", True)}


def test_not_a_git_directory_changes_nothing(tmp_path: Path, store: Store) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    save(store, "Note", "feat")
    assert sync_branches(store, PROJECT, plain, 1) is None
    assert rows(store) == {"Note": ("feat", False)}


def test_the_prompt_sync_creates_no_database_and_waits_for_the_migration(tmp_path: Path) -> None:
    """No file yet, or one without m013's or m023's tables: nothing is created or synced
    (the session start's Store.open migrates), and the fingerprint is not noted, so the
    next prompt tries again."""
    repo = new_repo(tmp_path / "widgets")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "THATCH_DB_PATH": str(tmp_path / "x.db")}
    missing = tmp_path / "none.db"
    assert prompt_sync(PROJECT, repo, env, lambda: opened_records(missing), 1) is None
    assert not missing.exists()
    bare = tmp_path / "bare.db"
    sqlite3.connect(bare).close()
    assert prompt_sync(PROJECT, repo, env, lambda: opened_records(bare), 1) is None
    before_renames = tmp_path / "m022.db"  # migrated by a release without m023
    Store.open(before_renames).close()
    with sqlite3.connect(before_renames) as conn:
        conn.execute(f"DROP TABLE {BRANCH_RENAMES_TABLE}")
        conn.execute(f"DELETE FROM {MIGRATIONS_TABLE} WHERE name = 'm023_branch_renames'")
    assert prompt_sync(PROJECT, repo, env, lambda: opened_records(before_renames), 1) is None
    common = git_refs.common_dir(repo)
    assert common is not None and not fingerprint_file(env, common).exists()


def test_the_earlier_release_writes_beside_the_lifecycle(tmp_path: Path) -> None:
    """m013 adds tables only: the earlier release's exact statements still work on a file
    where a sync promoted and archived, and a memory it saved is followed like any other."""
    from tests.test_store_compat import run_earlier_release

    path = tmp_path / "thatch.db"
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "feat")
    feature(repo, "spike")
    now = "2024-07-01T10:00:00.000Z"
    clock = Clock()
    with Store.open(path) as store:
        save(store, "Feat plan", "feat")
        sync(store, repo, clock)
    run_earlier_release(
        path,
        ("ensure_store", [PROJECT]),
        ("insert", ["spike-idea", PROJECT, "Spike idea", "# Spike idea", None, None, "spike",
                    None, 0, now, now]),
    )  # fmt: skip
    merge_ff(repo, "feat")
    git(repo, "branch", "-q", "-D", "feat", "spike")
    with Store.open(path) as store:
        assert sync(store, repo, clock) == {"feat": "promoted", "spike": "archived"}
    run_earlier_release(
        path,
        ("upsert", ["feat-plan", PROJECT, "Feat plan", "# Feat plan v2", None, None, None,
                    None, 0, now, now, None]),
        ("edit_entry", ["# Spike idea v2", now, "spike-idea", PROJECT]),
        ("forget", ["feat-plan", PROJECT]),
    )  # fmt: skip
    with Store.open(path) as store:
        assert rows(store) == {"Spike idea": ("spike", True)}
        assert restore_branch(store, PROJECT, "spike", clock()).restored == 1
        assert rows(store) == {"Spike idea": ("spike", False)}


def test_a_sync_decides_at_most_max_checks_and_keeps_the_rest_for_the_next(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from thatch.frontend import branch_sync

    monkeypatch.setattr(branch_sync, "MAX_CHECKS", 1)
    repo = new_repo(tmp_path / "widgets")
    for name in ("one", "two"):
        feature(repo, name)
        save(store, f"{name} idea", name)
    clock = Clock()
    sync(store, repo, clock)
    git(repo, "branch", "-q", "-D", "one", "two")
    assert sync(store, repo, clock) == {"one": "archived"}
    assert sync(store, repo, clock) == {"two": "archived"}
    assert sync(store, repo, clock) == {}


SYNC_PROCESS = """
import sys
from pathlib import Path
from thatch.frontend.branch_sync import sync_branches
from thatch.frontend.store.memory_store import Store
with Store.open(sys.argv[1]) as store:
    sync_branches(store, sys.argv[3], Path(sys.argv[2]), 5_000)
"""


def test_processes_syncing_at_once_change_each_memory_once(tmp_path: Path) -> None:
    """Four processes (two sessions starting, two prompts) sync the same deletion at
    once: each memory is promoted or archived exactly once, one event each."""
    import sys

    path = tmp_path / "thatch.db"
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "feat")
    feature(repo, "spike")
    clock = Clock()
    with Store.open(path) as store:
        for i in range(20):
            save(store, f"Feat note {i}", "feat")
            save(store, f"Spike note {i}", "spike")
        sync(store, repo, clock)
    merge_squash(repo, "feat")
    git(repo, "branch", "-q", "-D", "feat", "spike")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SYNC_PROCESS, str(path), str(repo), PROJECT],
            stderr=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    with Store.open(path) as store:
        state = rows(store)
        events = store.conn.execute(
            "SELECT action, count(*), count(DISTINCT slug) FROM _thatch_branch_events "
            "GROUP BY action ORDER BY action"
        ).fetchall()
    assert events == [("archived", 20, 20), ("promoted", 20, 20)]
    assert {v for k, v in state.items() if k.startswith("Feat")} == {(None, False)}
    assert {v for k, v in state.items() if k.startswith("Spike")} == {("spike", True)}


def test_a_pushed_branch_deleted_locally_waits_for_the_host(tmp_path: Path, store: Store) -> None:
    """Deleted here before the host merged it: while origin still has it nothing is
    decided; once a fetch shows it squash-merged and gone it is promoted, and a pushed
    branch the host deleted unmerged is archived then."""
    remote, work, clock = pushed_feat_and_wip(tmp_path, store)
    git(work, "branch", "-q", "-D", "feat", "wip")
    assert sync(store, work, clock) == {}
    feature(work, "other")  # a ref moves, the default branch does not
    assert sync(store, work, clock) == {}
    assert rows(store) == {"Feat plan": ("feat", False), "Wip plan": ("wip", False)}
    host = tmp_path / "host"
    git(tmp_path, "clone", "-q", str(remote), str(host))
    git(host, "merge", "-q", "--squash", "origin/feat")
    git(host, "commit", "-q", "-m", "squash feat")
    git(host, "push", "-q", "origin", "main", ":feat", ":wip")
    git(work, "fetch", "-q", "--prune")
    assert sync(store, work, clock) == {"feat": "promoted", "wip": "archived"}
    assert rows(store) == {"Feat plan": (None, False), "Wip plan": ("wip", True)}
    assert sync(store, work, clock) == {}


def test_a_gone_branchs_memories_are_found_through_the_partial_index(store: Store) -> None:
    """The queries of a deletion read the branch-scoped rows only, never the whole store."""
    plans = [
        store.conn.execute(f"EXPLAIN QUERY PLAN {sql}", args).fetchall()
        for sql, args in (
            (
                "SELECT DISTINCT branch FROM entries WHERE store = ? AND branch IS NOT NULL "
                "AND archived = 0 AND branch IN (SELECT value FROM json_each(?))",
                (PROJECT, '["feat"]'),
            ),
            (
                "SELECT slug FROM entries WHERE store = ? AND branch = ? AND archived = 0",
                (PROJECT, "feat"),
            ),
        )
    ]
    for plan in plans:
        assert "USING INDEX thatch_entries_branch" in str(plan), plan


def test_origin_branch_in_a_file_without_the_tables_is_none(tmp_path: Path) -> None:
    from thatch.frontend.store.transactions import Transactions

    conn = sqlite3.connect(tmp_path / "old.db")
    try:
        assert BranchRecords(Transactions(conn)).origin_branch(PROJECT, "x") is None
    finally:
        conn.close()


def test_an_unwritable_cache_costs_syncs_never_the_sync(tmp_path: Path, store: Store) -> None:
    """The fingerprint is a cache: a cache directory that cannot be written (here a file
    stands where it would be) leaves every sync to run, and none fails."""
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "spike")
    save(store, "Spike idea", "spike")
    (tmp_path / "cache").write_text("not a directory\n")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "THATCH_DB_PATH": str(tmp_path / "x.db")}
    clock = Clock()
    assert session_sync(store, PROJECT, repo, env, clock()) is not None
    git(repo, "branch", "-q", "-D", "spike")
    result = session_sync(store, PROJECT, repo, env, clock())
    assert result is not None and [c.action for c in result.changes] == ["archived"]


BAD_NAME = "bad\udcffname"  # git allows a branch name that is not UTF-8; SQLite text cannot


@pytest.mark.parametrize("where", ["loose", "packed", "listed by git"])
def test_a_branch_name_that_is_not_utf8_is_skipped_and_the_others_follow_git(
    tmp_path: Path, store: Store, where: str
) -> None:
    """Such a ref cannot be named in the snapshot, so it is left out (as a branch never
    seen); it used to end every sync with a UnicodeEncodeError, and deleted branches were
    never archived or promoted."""
    repo = new_repo(tmp_path / "widgets")
    if where == "listed by git":
        # What thatch takes for a reftable repository: git's for-each-ref lists the refs.
        (repo / ".git" / "reftable").mkdir()
    feature(repo, "spike")
    git(repo, "branch", BAD_NAME)
    if where == "packed":
        git(repo, "pack-refs", "--all")
    save(store, "Spike idea", "spike")
    clock = Clock()
    sync(store, repo, clock)
    seen = BranchRecords(store.tx).snapshot(PROJECT, str(repo / ".git"))
    assert sorted(seen) == ["refs/heads/main", "refs/heads/spike"]  # no name made up either
    git(repo, "branch", "-q", "-D", "spike")
    assert sync(store, repo, clock) == {"spike": "archived"}
    assert rows(store) == {"Spike idea": ("spike", True)}


def test_a_repository_whose_path_is_not_utf8_follows_git(tmp_path: Path, store: Store) -> None:
    """Its snapshot is keyed by the path with the bytes that are not UTF-8 as ``\\xNN``."""
    parent = tmp_path / "caf\udce9"
    parent.mkdir()
    repo = new_repo(parent / "widgets")
    feature(repo, "spike")
    save(store, "Spike idea", "spike")
    clock = Clock()
    sync(store, repo, clock)
    key = str(tmp_path / "caf\\xe9" / "widgets" / ".git")
    assert git_refs.HEADS + "spike" in BranchRecords(store.tx).snapshot(PROJECT, key)
    git(repo, "branch", "-q", "-D", "spike")
    assert sync(store, repo, clock) == {"spike": "archived"}


def test_restore_leaves_a_memory_written_since_the_archive(tmp_path: Path, store: Store) -> None:
    """Someone unarchived and archived it again after the sync did (or rewrote it): their
    choice stands; an untouched one beside it is restored."""
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "feat")
    save(store, "Decision X", "feat")
    save(store, "Decision Y", "feat")
    clock = Clock()
    sync(store, repo, clock)
    git(repo, "branch", "-q", "-D", "feat")
    assert sync(store, repo, clock) == {"feat": "archived"}
    for archived, text in ((False, "chose X"), (True, "kept as record")):
        store.remember(PROJECT, "Decision X", text, None, None, branch="feat", overwrite=True,
                       archived=archived)  # fmt: skip
    assert restore_branch(store, PROJECT, "feat", clock()) == (1, 1)  # restored, left
    assert rows(store) == {"Decision X": ("feat", True), "Decision Y": ("feat", False)}


def test_restore_says_when_all_it_archived_changed_since(tmp_path: Path, store: Store) -> None:
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "feat")
    save(store, "Decision X", "feat")
    clock = Clock()
    sync(store, repo, clock)
    git(repo, "branch", "-q", "-D", "feat")
    sync(store, repo, clock)
    store.remember(PROJECT, "Decision X", "kept as record", None, None, branch="feat",
                   overwrite=True, archived=True)  # fmt: skip
    with pytest.raises(NothingToRestoreError, match=r'the 1 memory of branch "feat" .* changed'):
        restore_branch(store, PROJECT, "feat", clock())
    assert rows(store) == {"Decision X": ("feat", True)}


def test_restore_echoes_at_most_the_start_of_a_long_name(store: Store) -> None:
    with pytest.raises(NothingToRestoreError) as raised:
        restore_branch(store, PROJECT, "x" * 100_000, 1)
    message = str(raised.value)
    assert f'branch "{"x" * 200}…" in store' in message
    assert len(message) < 400


def renames(store: Store) -> list[tuple[str, str, str]]:
    listed = store.conn.execute(
        f"SELECT slug, old_branch, new_branch FROM {BRANCH_RENAMES_TABLE} ORDER BY id"
    )
    return [(str(slug), str(old), str(new)) for slug, old, new in listed]


def test_a_renamed_branch_keeps_its_memories_under_the_new_name(
    tmp_path: Path, store: Store
) -> None:
    """``git branch -m``: the old name is gone and a new one appeared at its tip. The
    memories follow the branch (one ``renamed`` record each), not archived."""
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "topic")
    save(store, "Topic note", "topic")
    clock = Clock()
    sync(store, repo, clock)
    git(repo, "branch", "-m", "topic", "topic-renamed")
    assert sync(store, repo, clock) == {"topic": "renamed"}
    assert rows(store) == {"Topic note": ("topic-renamed", False)}
    assert renames(store) == [("topic-note", "topic", "topic-renamed")]
    git(repo, "branch", "-q", "-D", "topic-renamed")
    assert sync(store, repo, clock) == {"topic-renamed": "archived"}
    assert restore_branch(store, PROJECT, "topic-renamed", clock()).restored == 1


def test_a_rename_is_read_from_git_where_refs_keep_no_log_files(
    tmp_path: Path, store: Store
) -> None:
    """A reftable repository has no logs/refs/heads files: git is asked for the new
    branch's reflog (an empty reftable folder sends the sync there; git here still
    answers from its files)."""
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "topic")
    save(store, "Topic note", "topic")
    clock = Clock()
    sync(store, repo, clock)
    (repo / ".git" / "reftable").mkdir()
    git(repo, "branch", "-m", "topic", "topic-renamed")
    assert sync(store, repo, clock) == {"topic": "renamed"}
    assert rows(store) == {"Topic note": ("topic-renamed", False)}


def test_a_copy_made_before_the_branch_went_takes_its_memories(
    tmp_path: Path, store: Store
) -> None:
    """``git branch -c topic copy; git branch -D topic`` between two syncs is a rename too;
    two copies at the tip say nothing about which one carries on: archived as before."""
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "topic")
    feature(repo, "spike")
    save(store, "Topic note", "topic")
    save(store, "Spike idea", "spike")
    clock = Clock()
    sync(store, repo, clock)
    git(repo, "branch", "-c", "topic", "copy")
    git(repo, "branch", "-q", "-D", "topic")
    git(repo, "branch", "-c", "spike", "spike-a")
    git(repo, "branch", "-c", "spike", "spike-b")
    git(repo, "branch", "-q", "-D", "spike")
    assert sync(store, repo, clock) == {"topic": "renamed", "spike": "archived"}
    assert rows(store) == {"Topic note": ("copy", False), "Spike idea": ("spike", True)}


def test_a_branch_made_where_a_merged_one_ended_does_not_take_its_memories(
    tmp_path: Path, store: Store
) -> None:
    """Merge a feature fast-forward, delete it, start the next piece of work: the new
    branch stands at the finished one's tip, but only git's record of a rename or copy
    (its reflog) makes it the same branch. The finished branch's memories are promoted,
    as merged, not moved to the next piece of work (a review's finding)."""
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "feat")
    save(store, "Feat note", "feat")
    clock = Clock()
    sync(store, repo, clock)
    merge_ff(repo, "feat")
    git(repo, "branch", "-q", "-d", "feat")
    git(repo, "checkout", "-q", "-b", "next-thing")
    assert sync(store, repo, clock) == {"feat": "promoted"}
    assert rows(store) == {"Feat note": (None, False)}
