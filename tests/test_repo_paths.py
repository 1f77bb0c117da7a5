"""The repo identity cache (docs/chat.md §8) with real git repositories and worktrees."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.fake_embedder import rows
from tests.support.hookrun import hook_env, run_hook
from thatch.frontend.project import detect_store, list_branches, project_store
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.repo_paths import RepoPaths


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def repo(path: Path, remote: str | None = None) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "i")
    if remote:
        git(path, "remote", "add", "origin", remote)
    return path


def worktree(main: Path, path: Path, branch: str) -> Path:
    git(main, "worktree", "add", "-q", "-b", branch, str(path))
    return path


def cache(tmp_path: Path) -> RepoPaths:
    path = tmp_path / "thatch.db"
    Store.open(path).close()
    return RepoPaths.from_env({"THATCH_DB_PATH": str(path)})  # type: ignore[return-value]


def test_a_deleted_worktree_keeps_its_store_by_remote(tmp_path: Path) -> None:
    main = repo(tmp_path / "widgets", "git@github.com:acme/widgets.git")
    wt = worktree(main, tmp_path / "feature-x", "feature-x")
    paths = cache(tmp_path)
    assert detect_store(wt, cache=paths) == "acme/widgets"
    assert paths.lookup(str(wt.resolve())) == (str(main.resolve()), "acme/widgets")
    shutil.rmtree(wt)  # rm -rf, not git worktree remove
    assert detect_store(wt, cache=paths) == "acme/widgets"
    assert detect_store(wt) == "unknown"  # without the cache: never the basename
    assert sorted(list_branches(wt, {"THATCH_DB_PATH": str(tmp_path / "thatch.db")})) == [
        "feature-x",
        "main",
    ]
    paths.close()


def test_common_dir_identity_and_a_miss(tmp_path: Path) -> None:
    main = repo(tmp_path / "mainrepo")
    wt = worktree(main, tmp_path / "wt-fix", "fix-1")
    paths = cache(tmp_path)
    assert detect_store(wt, cache=paths) == "mainrepo"
    shutil.rmtree(wt)
    assert detect_store(wt, cache=paths) == "mainrepo"
    assert detect_store(tmp_path / "never-seen", cache=paths) == "unknown"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert detect_store(plain, cache=paths) == "plain"
    shutil.rmtree(plain)
    assert detect_store(plain, cache=paths) == "unknown"  # the basename is never cached
    paths.close()


def test_definitive_mismatch_evicts_and_a_missing_main_keeps(tmp_path: Path) -> None:
    main = repo(tmp_path / "svc", "https://github.com/acme/svc.git")
    wt = worktree(main, tmp_path / "topic", "topic")
    paths = cache(tmp_path)
    assert detect_store(wt, cache=paths) == "acme/svc"
    shutil.rmtree(wt)
    # The main checkout is not a git checkout right now (a re-clone in progress): kept.
    shutil.rmtree(main / ".git")
    assert detect_store(wt, cache=paths) == "acme/svc"
    # Gone altogether: kept.
    shutil.rmtree(main)
    assert detect_store(wt, cache=paths) == "acme/svc"
    # Now another repository lives there: evicted, unknown.
    repo(main, "https://github.com/other/thing.git")
    assert detect_store(wt, cache=paths) == "unknown"
    assert paths.lookup(str(wt.resolve())) is None
    paths.close()


def test_hooks_of_a_removed_worktree_still_name_the_real_store(tmp_path: Path) -> None:
    """A worktree used by a hook, then rm -rf: the next hook names the real store."""
    main = repo(tmp_path / "widgets", "git@github.com:acme/widgets.git")
    wt = worktree(main, tmp_path / "fix-login", "fix-login")
    env = hook_env(tmp_path)
    Store.open(env["THATCH_DB_PATH"]).close()
    first = run_hook(["reminder"], {"session_id": "s1", "cwd": str(wt)}, env)
    assert '"acme/widgets"' in first.stdout.decode()
    shutil.rmtree(wt)
    gone_env = {**env, "THATCH_PROJECT_DIR": str(wt)}
    second = run_hook(["reminder"], {"session_id": "s2"}, gone_env)
    assert second.returncode == 0 and second.stderr == b""
    text = second.stdout.decode()
    assert '"acme/widgets"' in text and "fix-login" not in text
    assert project_store(wt, gone_env) == "acme/widgets"
    assert rows(Path(env["THATCH_DB_PATH"]), "SELECT worktree_path, repo_slug FROM repo_paths") == [
        (str(wt.resolve()), "acme/widgets")
    ]
