"""``thatch setup --git-hooks`` (docs/database.md §branch-lifecycle), on real repositories:
the hooks append an event git commands never notice, exit 0 even when they cannot write,
change the refs' fingerprint, and never replace a hook that is not thatch's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.hookrun import hook_env, run_hook
from tests.test_branch_lifecycle import commit, feature, git, new_repo
from thatch.frontend import git_refs
from thatch.frontend.setup.git_hooks import HOOKS, MARKER


def setup_env(tmp_path: Path) -> dict[str, str]:
    env = hook_env(tmp_path)
    for name in ("CLAUDE_PROJECT_DIR", "THATCH_PROJECT_DIR", "CURSOR_PROJECT_DIR"):
        env.pop(name, None)
    return env


def test_hooks_append_events_and_move_the_fingerprint(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "widgets")
    feature(repo, "feat")
    env = setup_env(tmp_path)
    result = run_hook(["setup", "--git-hooks"], None, env, cwd=repo)
    assert result.returncode == 0, result.stderr
    hooks = repo / ".git" / "hooks"
    assert result.stdout.decode().splitlines() == [
        f"git hook {hook}: written {hooks / hook}" for hook in HOOKS
    ]
    for hook in HOOKS:
        assert os.access(hooks / hook, os.X_OK)
    before = git_refs.fingerprint(repo / ".git")
    git(repo, "merge", "-q", "--ff-only", "feat")
    git(repo, "branch", "-q", "-d", "feat")
    events = (repo / ".git" / git_refs.EVENTS_FILE).read_text().splitlines()
    assert (
        "reference-transaction refs/heads/feat 0000000000000000000000000000000000000000" in events
    )
    assert any(line.startswith("post-merge ") for line in events)
    assert git_refs.fingerprint(repo / ".git") != before
    again = run_hook(["setup", "--git-hooks"], None, env, cwd=repo)
    assert again.stdout.decode().splitlines() == [
        f"git hook {hook}: unchanged {hooks / hook}" for hook in HOOKS
    ]


def test_a_hook_that_cannot_write_still_exits_0_silently(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "widgets")
    assert run_hook(["setup", "--git-hooks"], None, setup_env(tmp_path), cwd=repo).returncode == 0
    (repo / ".git" / git_refs.EVENTS_FILE).mkdir()  # appending to it fails
    commit(repo, "x.txt", "x\n")
    git(repo, "checkout", "-q", "-b", "other")
    for hook in HOOKS:
        done = git_hook(repo, hook)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def git_hook(repo: Path, hook: str) -> subprocess.CompletedProcess[bytes]:
    args = ["committed"] if hook == "reference-transaction" else ["a", "b", "1"]
    return subprocess.run(
        [str(repo / ".git" / "hooks" / hook), *args],
        input=b"0 1 refs/heads/x\n",
        capture_output=True,
        cwd=repo,
        check=False,
    )


def test_someone_elses_hook_is_left_alone(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "widgets")
    theirs = repo / ".git" / "hooks" / "post-merge"
    theirs.write_text("#!/bin/sh\necho theirs\n")
    result = run_hook(["setup", "--git-hooks"], None, setup_env(tmp_path), cwd=repo)
    assert result.returncode == 0, result.stderr
    assert (
        f"git hook post-merge: left alone, {theirs} is not thatch's (thatch works without it)"
        in result.stdout.decode().splitlines()
    )
    assert theirs.read_text() == "#!/bin/sh\necho theirs\n"
    assert MARKER in (repo / ".git" / "hooks" / "post-checkout").read_text()


def test_outside_a_repository_the_error_is_clear(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    result = run_hook(["setup", "--git-hooks"], None, setup_env(tmp_path), cwd=plain)
    assert result.returncode == 1
    assert result.stderr.decode() == f"Error: --git-hooks: {plain} is not in a git repository\n"


def test_post_merge_reads_orig_head_from_a_dotgit_file(tmp_path: Path) -> None:
    """A checkout whose ``.git`` is a file (``gitdir: <relative dir>``, a submodule's) and
    no ``$GIT_DIR``: post-merge still records the commit before the merge, with built-ins
    only (PATH empty), and ``-`` when ORIG_HEAD cannot be read."""
    from thatch.frontend.setup.git_hooks import script

    checkout = tmp_path / "sub"
    (checkout / "gd").mkdir(parents=True)
    (checkout / ".git").write_text("gitdir: gd\n")
    orig = "a" * 40
    (checkout / "gd" / "ORIG_HEAD").write_text(orig + "\n")
    events = tmp_path / "thatch-events"
    hook = tmp_path / "post-merge"
    hook.write_text(script("post-merge", events))
    hook.chmod(0o755)
    env = {"PATH": ""}
    for expected in (orig, "-"):
        done = subprocess.run(["/bin/sh", str(hook), "0"], cwd=checkout, env=env, check=False)
        assert done.returncode == 0
        assert events.read_text().splitlines()[-1] == f"post-merge {expected} - {checkout}"
        (checkout / "gd" / "ORIG_HEAD").unlink(missing_ok=True)


def test_a_checkout_path_is_shown_as_data(tmp_path: Path) -> None:
    """A checkout whose directory name holds a newline and an escape: each hook's line
    names it escaped, one line per hook, none forged."""
    repo = new_repo(tmp_path / "w\ngit hook forged: written x\x1b[2K")
    result = run_hook(["setup", "--git-hooks"], None, setup_env(tmp_path), cwd=repo)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    shown = f"{tmp_path}/w\\ngit hook forged: written x\\u001b[2K/.git/hooks"
    assert lines == [f"git hook {hook}: written {shown}/{hook}" for hook in HOOKS]


def test_a_hooks_path_outside_the_git_dir_is_refused(tmp_path: Path) -> None:
    """core.hooksPath at a committed folder (`.husky`) or a folder every repository runs:
    hooks there are shared and would name this clone's events file, so none is written,
    the error says why and the Fix line what to do (exit 1); a hooks path inside the
    clone's git directory is this clone's own and gets them."""
    repo = new_repo(tmp_path / "widgets")
    env = setup_env(tmp_path)
    shared = tmp_path / "every-repo-hooks"
    for hooks_path, where in ((".husky", repo / ".husky"), (str(shared), shared)):
        git(repo, "config", "core.hooksPath", hooks_path)
        for dry_run in ([], ["--dry-run"]):
            result = run_hook(["setup", "--git-hooks", *dry_run], None, env, cwd=repo)
            assert result.returncode == 1
            assert result.stdout == b""
            error, fix = result.stderr.decode().splitlines()
            assert error == (
                f'Error: --git-hooks: core.hooksPath points at "{where}", outside this '
                f'clone\'s git directory "{repo / ".git"}": hooks there are shared (committed '
                "with the project, or run by every repository), and thatch's name this "
                "clone's files, so none were written"
            )
            assert fix.startswith("Fix: nothing is needed, thatch notices branch changes")
            assert "git config --unset core.hooksPath" in fix
        assert not where.exists()
    assert git(repo, "status", "--porcelain") == ""
    git(repo, "config", "core.hooksPath", ".git/own-hooks")
    result = run_hook(["setup", "--git-hooks"], None, env, cwd=repo)
    assert result.returncode == 0, result.stderr
    own = repo / ".git" / "own-hooks"
    assert result.stdout.decode().splitlines() == [
        f"git hook {hook}: written {own / hook}" for hook in HOOKS
    ]


def test_a_hooks_path_from_the_users_git_configuration_is_named_as_such(tmp_path: Path) -> None:
    """core.hooksPath set only in the user's git configuration: `git config --unset` in
    the clone fails (exit 5), so the Fix gives this clone a hooks folder of its own."""
    repo = new_repo(tmp_path / "widgets")
    shared = tmp_path / "every-repo-hooks"
    user_config = tmp_path / "gitconfig"
    user_config.write_text(f"[core]\n\thooksPath = {shared}\n")
    env = setup_env(tmp_path)
    env.update(GIT_CONFIG_GLOBAL=str(user_config), GIT_CONFIG_NOSYSTEM="1")
    result = run_hook(["setup", "--git-hooks"], None, env, cwd=repo)
    assert result.returncode == 1
    error, fix = result.stderr.decode().splitlines()
    assert error == (
        f'Error: --git-hooks: core.hooksPath points at "{shared}", set in your git '
        "configuration rather than this clone's: every repository runs hooks there, and "
        "thatch's name this clone's files, so none were written"
    )
    own = repo / ".git" / "hooks"
    assert fix == (
        "Fix: nothing is needed, thatch notices branch changes without these hooks; to have "
        f"them, give this clone its own hooks folder (git config core.hooksPath {own}; this "
        f'clone then runs none of the hooks in "{shared}") and rerun thatch setup --git-hooks'
    )
    assert "--unset" not in fix
    subprocess.run(["git", "config", "core.hooksPath", str(own)], cwd=repo, env=env, check=True)
    done = run_hook(["setup", "--git-hooks"], None, env, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert not shared.exists()


def test_a_relative_hooks_path_read_in_a_linked_worktree_says_why(tmp_path: Path) -> None:
    """core.hooksPath `.git/hooks` in a linked worktree names a folder inside its `.git`
    file: the refusal says so (it claimed the hooks there were shared)."""
    repo = new_repo(tmp_path / "widgets")
    linked = tmp_path / "widgets-feature"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    git(repo, "config", "core.hooksPath", ".git/hooks")
    env = setup_env(tmp_path)
    result = run_hook(["setup", "--git-hooks"], None, env, cwd=linked)
    assert result.returncode == 1
    error, fix = result.stderr.decode().splitlines()
    assert error == (
        f'Error: --git-hooks: core.hooksPath points at "{linked / ".git" / "hooks"}", inside '
        "this linked worktree's .git, which is a file: no hook can be there (git runs none "
        "from it), so none were written"
    )
    assert "shared" not in error
    assert f"git config core.hooksPath {repo / '.git' / 'hooks'}" in fix
    assert run_hook(["setup", "--git-hooks"], None, env, cwd=repo).returncode == 0
