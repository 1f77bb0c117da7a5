"""The hooks make branch memory follow git (docs/database.md §branch-lifecycle), as real
processes on recorded payloads in a real git repository with a real database: the
session-start reminder takes the snapshot and syncs; a prompt after a squash merge and an
unmerged delete promotes and archives; ``thatch restore-branch`` undoes the archive."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.support.hookrun import hook_env, run_hook, thatch_command
from tests.support.polling import poll
from tests.test_branch_lifecycle import feature, git, merge_squash, new_repo
from thatch.frontend.store.memory_store import Store

PAYLOADS = Path(__file__).parent / "fixtures" / "host-payloads"
STORE = "widgets"  # no remote: the repository's directory name


def payload(name: str, cwd: Path, **extra: str) -> dict[str, object]:
    document = json.loads((PAYLOADS / name).read_text())
    document.update(cwd=str(cwd), **extra)
    return dict(document)


def env_for(tmp_path: Path) -> dict[str, str]:
    env = hook_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    for name in ("CLAUDE_PROJECT_DIR", "THATCH_PROJECT_DIR", "CURSOR_PROJECT_DIR"):
        env.pop(name, None)
    return env


def state(db: Path) -> dict[str, tuple[str | None, int]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT label, branch, archived FROM entries WHERE store = ?", (STORE,))
        return {label: (branch, archived) for label, branch, archived in rows}
    finally:
        conn.close()


def spike_seen_at_session_start(
    tmp_path: Path,
) -> tuple[Path, dict[str, str], Path, dict[str, object]]:
    """A repo with branch spike and a memory on it, after one session start's sync:
    (repo, env, database, the session-start payload)."""
    repo = new_repo(tmp_path / STORE)
    feature(repo, "spike")
    env = env_for(tmp_path)
    db = Path(env["THATCH_DB_PATH"])
    with Store.open(db) as store:
        store.remember(STORE, "Spike idea", "# Spike idea\n\nbody", None, None, branch="spike")
    start = payload("claude-SessionStart-startup.json", repo)
    assert run_hook(["reminder"], start, env).returncode == 0
    return repo, env, db, start


def test_reminder_then_prompt_promote_and_archive(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / STORE)
    feature(repo, "feat")
    feature(repo, "spike")
    env = env_for(tmp_path)
    db = Path(env["THATCH_DB_PATH"])
    with Store.open(db) as store:
        for label, branch in (("Feat plan", "feat"), ("Spike idea", "spike")):
            store.remember(STORE, label, f"# {label}\n\nbody", None, None, branch=branch)
    start = run_hook(["reminder"], payload("claude-SessionStart-startup.json", repo), env)
    assert start.returncode == 0, start.stderr
    merge_squash(repo, "feat")
    git(repo, "branch", "-q", "-D", "feat", "spike")
    prompt = payload("claude-UserPromptSubmit.json", repo, prompt="what changed in the parser?")
    result = run_hook(["flush-tools"], prompt, env)
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    assert state(db) == {"Feat plan": (None, 0), "Spike idea": ("spike", 1)}
    shown = run_hook(["show", "Feat plan"], None, env, cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.decode().splitlines()[:2] == [
        "[widgets] Feat plan",
        "origin branch: feat (merged)",
    ]

    restored = run_hook(["restore-branch", "spike"], None, env, cwd=repo)
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.decode() == 'Restored 1 memory of branch "spike" in store "widgets".\n'
    assert state(db)["Spike idea"] == ("spike", 0)
    again = run_hook(["restore-branch", "spike"], None, env, cwd=repo)
    assert again.returncode == 1
    assert again.stderr.decode().startswith(
        'Error: No memories of branch "spike" in store "widgets" were archived'
    )


def test_the_session_start_sync_alone_archives(tmp_path: Path) -> None:
    """No prompt in between: the next session's reminder sees the deletion."""
    repo, env, db, start = spike_seen_at_session_start(tmp_path)
    git(repo, "branch", "-q", "-D", "spike")
    assert run_hook(["reminder"], start, env).returncode == 0
    assert state(db) == {"Spike idea": ("spike", 1)}


def test_restore_branch_help_and_empty_name(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    shown = run_hook(["restore-branch", "--help"], None, env)
    assert shown.returncode == 0
    assert shown.stdout.startswith(b"Usage: thatch restore-branch [OPTIONS] NAME")
    empty = run_hook(["restore-branch", " "], None, env, cwd=tmp_path)
    assert empty.returncode == 1
    assert b"a branch name is required" in empty.stderr


CHECK = """
import os, sys
from pathlib import Path
from thatch.frontend.hooks.prompt_hooks import follow_branches
follow_branches("widgets", Path(sys.argv[1]), os.environ)
print("thatch.frontend.store.memory_store" in sys.modules)
"""


def test_unchanged_refs_cost_the_prompt_hook_no_store_and_no_git(tmp_path: Path) -> None:
    """The prompt hook's check while nothing changed runs no git; after a branch is
    deleted it syncs. Neither imports the memory Store (~60 ms)."""
    repo, env, db, _start = spike_seen_at_session_start(tmp_path)
    no_git = {**env, "PATH": str(tmp_path / "no-such-bin")}  # git cannot even be found

    def check(env: dict[str, str]) -> str:
        result = subprocess.run(
            [sys.executable, "-c", CHECK, str(repo)], env=env, capture_output=True, check=True
        )
        assert result.stderr == b"", result.stderr
        return result.stdout.decode().strip()

    assert check(no_git) == "False"
    assert state(db) == {"Spike idea": ("spike", 0)}
    git(repo, "branch", "-q", "-D", "spike")
    assert check(env) == "False"
    assert state(db) == {"Spike idea": ("spike", 1)}


STEADY = """
import os, sys
from pathlib import Path
from thatch.frontend.hooks.prompt_hooks import follow_branches
from thatch.frontend.project import current_branch
from thatch.frontend.project_memo import remembered_store
directory = Path(sys.argv[1])
project = remembered_store(directory, os.environ)
follow_branches(project, directory, os.environ)
print(project, current_branch(directory, os.environ))
print(" ".join(sorted(sys.modules)))
"""


def test_a_prompt_in_an_unchanged_checkout_starts_no_process_and_imports_little(
    tmp_path: Path,
) -> None:
    """After the session start, the prompt hook's store name, branch sync check and branch
    start no git (not even the module that would run one), open no database for them,
    and load no dataclasses (inspect, ~5 ms)."""
    repo, env, _db, _start = spike_seen_at_session_start(tmp_path)
    no_git = {**env, "PATH": str(tmp_path / "no-such-bin")}
    result = subprocess.run(
        [sys.executable, "-c", STEADY, str(repo)], env=no_git, capture_output=True, check=True
    )
    assert result.stderr == b"", result.stderr
    named, modules = result.stdout.decode().splitlines()
    assert named == f"{STORE} main"
    loaded = set(modules.split())
    assert (
        loaded
        & {
            "subprocess",
            "dataclasses",
            "sqlite3",
            "thatch.frontend.store.memory_store",
            "thatch.frontend.store.branch_lifecycle",
        }
        == set()
    )


def test_the_mcp_server_syncs_at_its_start(tmp_path: Path) -> None:
    """A host without thatch's hooks: ``thatch mcp`` follows git when it starts, off the
    requests' path, so a branch deleted since the last sync has its memory archived."""
    repo, env, db, _start = spike_seen_at_session_start(tmp_path)
    git(repo, "branch", "-q", "-D", "spike")
    process = subprocess.Popen(
        [*thatch_command("mcp")], env={**env, "THATCH_PROJECT_DIR": str(repo)},
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert poll(lambda: state(db) == {"Spike idea": ("spike", 1)}, timeout=60), state(db)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(60)
        if process.stderr is not None:
            process.stderr.close()


def test_a_branch_name_that_is_not_utf8_costs_the_hooks_nothing(tmp_path: Path) -> None:
    """Such a ref is left out of the snapshot: the prompt hook prints nothing (it printed
    an internal UnicodeEncodeError on every prompt), the sync archives the deleted branch,
    and ``thatch hygiene`` reports (it was a usage error blaming its arguments)."""
    repo, env, db, _start = spike_seen_at_session_start(tmp_path)
    git(repo, "branch", "bad\udcffname")
    git(repo, "branch", "-q", "-D", "spike")
    prompt = payload("claude-UserPromptSubmit.json", repo, prompt="what changed?")
    result = run_hook(["flush-tools"], prompt, env)
    assert (result.returncode, result.stderr) == (0, b"")
    assert state(db) == {"Spike idea": ("spike", 1)}
    hygiene = run_hook(["hygiene"], None, env, cwd=repo)
    assert (hygiene.returncode, hygiene.stderr) == (0, b""), hygiene.stderr


def test_restore_names_what_it_left_as_written(tmp_path: Path) -> None:
    """A restore that left a memory written since the archive said only how many it
    restored, as if that were all there was."""
    repo = new_repo(tmp_path / STORE)
    feature(repo, "spike")
    env = env_for(tmp_path)
    db = Path(env["THATCH_DB_PATH"])
    with Store.open(db) as store:
        for label in ("Spike idea", "Spike risk"):
            store.remember(STORE, label, f"# {label}\n\nbody", None, None, branch="spike")
    assert run_hook(["hygiene"], None, env, cwd=repo).returncode == 0
    git(repo, "branch", "-q", "-D", "spike")
    assert run_hook(["hygiene"], None, env, cwd=repo).returncode == 0
    assert state(db) == {"Spike idea": ("spike", 1), "Spike risk": ("spike", 1)}
    with Store.open(db) as store:  # a person's later choice: archived, as a record
        store.remember(STORE, "Spike risk", "# Spike risk\n\nkept as a record", None, None,
                       branch="spike", overwrite=True, archived=True)  # fmt: skip
    restored = run_hook(["restore-branch", "spike"], None, env, cwd=repo)
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.decode() == (
        'Restored 1 memory of branch "spike" in store "widgets"; 1 memory changed since '
        "stays as written.\n"
    )
    assert state(db) == {"Spike idea": ("spike", 0), "Spike risk": ("spike", 1)}
