"""The hooks' memo of a project directory's store (frontend/project_memo.py): a prompt in
an unchanged checkout names its store without git; any change to what git would read
for the answer is seen (real git, real files)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.hookrun import hook_env, run_hook
from thatch.frontend.project import project_store
from thatch.frontend.project_memo import memo_file, remembered_store


def git(cwd: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def env_for(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "memo-home"
    home.mkdir()
    env = hook_env(tmp_path, HOME=str(home), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("XDG_CONFIG_HOME", None)
    for name in [name for name in env if name.startswith("GIT_")]:
        del env[name]
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def repo_with_remote(path: Path, env: dict[str, str], url: str) -> Path:
    path.mkdir(parents=True)
    git(path, env, "init", "-q", "-b", "main")
    git(path, env, "remote", "add", "origin", url)
    return path


def without_git(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {**env, "PATH": str(tmp_path / "no-such-bin")}  # git cannot even be found


def test_an_unchanged_checkout_is_named_without_git(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    repo = repo_with_remote(tmp_path / "widgets", env, "git@github.com:acme/widgets.git")
    assert remembered_store(repo, env) == "acme/widgets"
    assert project_store(repo, without_git(env, tmp_path)) == "widgets"  # git is needed...
    (repo / "a").write_text("a\n")
    git(repo, env, "add", "a")  # an index write moves .git's mtime: nothing git answers here
    git(repo, env, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    git(repo, env, "branch", "spike")
    git(repo, env, "branch", "-q", "-D", "spike")  # rewrites the config, same content
    assert remembered_store(repo, without_git(env, tmp_path)) == "acme/widgets"  # ...once


def test_a_changed_remote_is_seen_from_every_worktree(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    repo = repo_with_remote(tmp_path / "widgets", env, "git@github.com:acme/widgets.git")
    (repo / "a").write_text("a\n")
    git(repo, env, "add", "a")
    git(repo, env, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    tree = tmp_path / "spike"
    git(repo, env, "worktree", "add", "-q", "-b", "spike", str(tree))
    assert remembered_store(tree, env) == "acme/widgets"
    git(repo, env, "remote", "set-url", "origin", "git@github.com:acme/gadgets.git")
    assert remembered_store(tree, env) == "acme/gadgets"
    assert remembered_store(tree, without_git(env, tmp_path)) == "acme/gadgets"


def test_a_global_url_rewrite_is_seen(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    gitconfig = Path(env["HOME"]) / ".gitconfig"
    gitconfig.write_text('[url "git@github.com:acme/"]\n\tinsteadOf = short:\n')
    repo = repo_with_remote(tmp_path / "widgets", env, "short:widgets")
    assert remembered_store(repo, env) == "acme/widgets"
    gitconfig.write_text('[url "git@github.com:other/"]\n\tinsteadOf = short:\n')
    assert remembered_store(repo, env) == "other/widgets"


def test_a_config_that_includes_another_file_is_never_memoized(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    extra = tmp_path / "extra.gitconfig"
    extra.write_text('[url "git@github.com:acme/"]\n\tinsteadOf = short:\n')
    repo = repo_with_remote(tmp_path / "widgets", env, "short:widgets")
    git(repo, env, "config", "include.path", str(extra))
    assert remembered_store(repo, env) == "acme/widgets"
    assert not memo_file(env, repo).exists()
    extra.write_text('[url "git@github.com:other/"]\n\tinsteadOf = short:\n')
    assert remembered_store(repo, env) == "other/widgets"


def test_a_directory_that_becomes_a_checkout_is_named_anew(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    project = tmp_path / "mono" / "service"
    project.mkdir(parents=True)
    assert remembered_store(project, env) == "service"
    repo_with_remote(tmp_path / "mono" / "x", env, "git@github.com:acme/unused.git")
    git(tmp_path / "mono", env, "init", "-q", "-b", "main")
    git(tmp_path / "mono", env, "remote", "add", "origin", "git@github.com:acme/mono.git")
    assert remembered_store(project, env) == "acme/mono"


def test_the_hooks_name_the_store_from_the_memo(tmp_path: Path) -> None:
    """The session start leaves the memo, and a hook with the memo in place asks no git:
    the name it prints is the memo's (here edited, to tell it from git's)."""
    env = env_for(tmp_path)
    repo = repo_with_remote(tmp_path / "widgets", env, "git@github.com:acme/widgets.git")
    start = {"session_id": "s1", "cwd": str(repo), "hook_event_name": "SessionStart"}
    for _ in range(2):  # the first one creates the database: a new file is asked anew
        assert run_hook(["reminder"], start, env).returncode == 0
    memo = memo_file(env, repo)
    assert memo.read_text().endswith("\nacme/widgets")
    memo.write_text(memo.read_text().replace("\nacme/widgets", "\nacme/memoized"))
    done = run_hook(["reminder"], start, without_git(env, tmp_path))
    assert done.returncode == 0
    assert '"acme/memoized"' in done.stdout.decode()


def test_a_fifo_in_place_of_the_git_config_never_holds_the_prompt(tmp_path: Path) -> None:
    """Reading a FIFO without a writer waits forever. Without git (as a prompt would find
    it, git being unable to read it either) the directory's name is the answer, at once."""
    import os

    env = env_for(tmp_path)
    repo = repo_with_remote(tmp_path / "widgets", env, "git@github.com:acme/widgets.git")
    (repo / ".git" / "config").unlink()
    os.mkfifo(repo / ".git" / "config")
    assert remembered_store(repo, without_git(env, tmp_path)) == "widgets"
