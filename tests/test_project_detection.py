"""Project-store detection (docs/database.md §project-store): remote parsing and real git
repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from thatch.frontend.project import detect_store, list_branches, parse_remote, project_store


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("git@github.com:Owner/Repo.git", "Owner/Repo"),
        ("git@github.com:owner/repo", "owner/repo"),
        ("  git@gitlab.example.com:group/sub/proj.git \n", "group/sub/proj"),
        ("https://github.com/owner/repo.git", "owner/repo"),
        ("https://github.com/owner/repo/", "owner/repo"),
        ("https://github.com/owner/repo.git///", "owner/repo"),
        ("http://host.local/owner/repo", "owner/repo"),
        ("https://user:s3cret@github.com/owner/repo.git", "owner/repo"),
        ("https://oauth2:tok@gitlab.com/a/b/c.git", "a/b/c"),
        ("https://gitlab.com/a/b/c.git", "a/b/c"),
        ("ssh://git@github.com/owner/repo.git", "owner/repo"),
        ("ssh://git@host:2222/team/tools/repo", "team/tools/repo"),
        ("git://example.org/owner/repo.git", "owner/repo"),
        ("https://github.com/owner/repo.git.git", "owner/repo.git"),
        ("https://github.com/Mixed/CaSe", "Mixed/CaSe"),
    ],
)
def test_remote_forms_parse(url: str, expected: str) -> None:
    """Every hosted remote form yields PATH/NAME, case preserved."""
    assert parse_remote(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "/srv/git/repo.git",
        "../relative/repo",
        "file:///srv/git/owner/repo.git",
        "ssh://deploy@host/owner/repo.git",
        "ssh://host/owner/repo",
        "https://github.com/repo",
        "git@github.com:repo.git",
        "repo",
        "",
        "   ",
        "ftp://host/owner/repo",
        "git@github.com/owner/repo",
    ],
)
def test_other_remotes_do_not_match(url: str) -> None:
    """Local paths, file://, ssh with another user and one-segment remotes give None."""
    assert parse_remote(url) is None


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return result.stdout


def make_repo(path: Path, *, commit: bool = False) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    if commit:
        (path / "f.txt").write_text("x")
        git(path, "add", "f.txt")
        git(path, "commit", "-q", "-m", "init")
    return path


def test_origin_remote_wins(tmp_path: Path) -> None:
    """A parsable origin gives owner/repo, from the root and from a subdirectory."""
    repo = make_repo(tmp_path / "checkout-name")
    git(repo, "remote", "add", "origin", "git@github.com:Acme/Widgets.git")
    (repo / "src" / "deep").mkdir(parents=True)
    assert detect_store(repo) == "Acme/Widgets"
    assert detect_store(repo / "src" / "deep") == "Acme/Widgets"
    assert project_store(repo) == "Acme/Widgets"


def test_unparsable_remote_falls_back_to_repository_name(tmp_path: Path) -> None:
    """A local-path origin moves on to the git common dir: the checkout's name."""
    repo = make_repo(tmp_path / "localclone")
    git(repo, "remote", "add", "origin", "/srv/git/other.git")
    (repo / "sub").mkdir()
    assert detect_store(repo / "sub") == "localclone"


def test_linked_worktree_resolves_to_main_checkout(tmp_path: Path) -> None:
    """A `git worktree add` checkout is named after the main checkout, not itself."""
    repo = make_repo(tmp_path / "mainrepo", commit=True)
    git(repo, "worktree", "add", "-q", "-b", "feature", str(tmp_path / "wt-feature"))
    assert detect_store(tmp_path / "wt-feature") == "mainrepo"


def test_bare_repository_keeps_git_suffix(tmp_path: Path) -> None:
    """A bare repository resolves to its directory name, `.git` suffix kept."""
    (tmp_path / "repo.git").mkdir()
    git(tmp_path / "repo.git", "init", "-q", "--bare")
    assert detect_store(tmp_path / "repo.git") == "repo.git"


def test_plain_directory_gives_its_basename(tmp_path: Path) -> None:
    """Outside git, the directory's own name is the store."""
    plain = tmp_path / "just-a-dir"
    plain.mkdir()
    assert detect_store(plain) == "just-a-dir"
    assert project_store(plain) == "just-a-dir"


def test_missing_directory_is_unknown_and_maps_to_global(tmp_path: Path) -> None:
    """A directory that does not exist is `unknown`; the project store is then `global`."""
    assert detect_store(tmp_path / "gone") == "unknown"
    assert project_store(tmp_path / "gone") == "global"


def test_git_location_variables_are_ignored(tmp_path: Path) -> None:
    """GIT_DIR in the environment does not redirect detection to another repository."""
    other = make_repo(tmp_path / "other")
    git(other, "remote", "add", "origin", "https://github.com/wrong/repo")
    repo = make_repo(tmp_path / "right")
    env = {**os.environ, "GIT_DIR": str(other / ".git")}
    assert detect_store(repo, env) == "right"


def test_list_branches(tmp_path: Path) -> None:
    """Local branch names via for-each-ref; [] outside a repository."""
    repo = make_repo(tmp_path / "branches", commit=True)
    git(repo, "branch", "feature/x")
    git(repo, "branch", "fix-1")
    assert sorted(list_branches(repo)) == ["feature/x", "fix-1", "main"]
    plain = tmp_path / "plain"
    plain.mkdir()
    assert list_branches(plain) == []
    assert list_branches(tmp_path / "missing") == []


def test_current_branch_reads_head_as_git_says_it(tmp_path: Path) -> None:
    """current_branch (run on every prompt) reads HEAD instead of starting git: the same
    answer as git for a checkout, a subdirectory, a worktree, a detached HEAD, no repo."""
    import subprocess

    from thatch.frontend.project import current_branch

    def git(*args: str, cwd: Path) -> str:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()

    repo = tmp_path / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=repo)
    git(
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
        cwd=repo,
    )
    git("worktree", "add", "-q", "-b", "feat/a", str(tmp_path / "wt"), cwd=repo)
    assert current_branch(repo) == "main"
    assert current_branch(repo / "src" / "deep") == "main"
    assert current_branch(tmp_path / "wt") == "feat/a"
    git("checkout", "-q", "--detach", cwd=tmp_path / "wt")
    assert current_branch(tmp_path / "wt") is None
    assert current_branch(repo) == "main"
    outside = tmp_path / "plain"
    outside.mkdir()
    assert current_branch(outside) is None


def test_a_fifo_in_place_of_head_never_holds_the_prompt(tmp_path: Path) -> None:
    """current_branch runs on every prompt: a FIFO at .git/HEAD blocked it for good. Not
    a file: not read, and git (whose calls here have a timeout) or nothing answers."""
    import os

    from thatch.frontend.project import current_branch

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    os.mkfifo(repo / ".git" / "HEAD")
    env = {"PATH": str(tmp_path / "no-git-here")}
    assert current_branch(repo, env) is None
