"""The prompt hook's recall nudge applies memory_recall's branch rule: in a worktree on
branch B it names memories of B and unscoped ones, never another branch's (real git repo
with two worktrees, `thatch flush-tools` run as a process on a recorded UserPromptSubmit
payload, a real database; cold path, and warm path through a running `thatch mcp`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.embedder_proc import EmbedderProcess
from tests.support.hookrun import NO_EMBEDDER, run_hook
from tests.test_recall_scan import mcp_server, wait_serving
from thatch.embedder.models.mock import mock_vector
from thatch.frontend.hooks import recall_scan
from thatch.frontend.project import current_branch, project_store
from thatch.frontend.store.memory_store import Store

PAYLOAD = Path(__file__).parent / "fixtures" / "host-payloads" / "claude-UserPromptSubmit.json"
PROMPT = "what is the plan for the parser rewrite on this branch?"
MEMORIES = {  # label -> branch (None: unscoped)
    "Parser rewrite plan on feat-a": "feat-a",
    "Parser rewrite plan on feat-b": "feat-b",
    "Parser rewrite notes": None,
}
QUOTED = re.compile(r'"([^"]+)"')


def git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@dataclass
class Repo:
    main: Path
    worktrees: dict[str, Path]  # branch -> its worktree
    env: dict[str, str]  # the hooks' and the MCP server's (live embedder, no project dir)
    db: Path


@pytest.fixture(scope="module")
def repo(
    tmp_path_factory: pytest.TempPathFactory, mock_embedder: EmbedderProcess
) -> Iterator[Repo]:
    root = tmp_path_factory.mktemp("branches")
    runtime = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))
    main = root / "widgets"
    main.mkdir()
    git(main, "init", "-q", "-b", "main")
    (main / "README.md").write_text("widgets\n")
    git(main, "add", "README.md")
    git(main, "commit", "-q", "-m", "first")
    worktrees = {}
    for branch in ("feat-a", "feat-b"):
        worktrees[branch] = root / branch
        git(main, "worktree", "add", "-q", "-b", branch, str(worktrees[branch]))
    env = {key: value for key, value in os.environ.items() if not key.startswith("THATCH_")}
    env.update(
        HOME=str(root / "home"),
        XDG_CONFIG_HOME=str(root / "home" / ".config"),
        XDG_CACHE_HOME=str(root / "home" / ".cache"),
        XDG_RUNTIME_DIR=str(runtime),
        THATCH_DB_PATH=str(root / "db" / "thatch.db"),
        THATCH_QUEUE_DIR=str(root / "queue"),
        THATCH_EMBEDDER_ADDR=mock_embedder.address,
        THATCH_RECALL_THRESHOLD="0.05",
    )
    db = root / "db" / "thatch.db"
    stores = {project_store(path, env) for path in (main, *worktrees.values())}
    assert stores == {"widgets"}  # one project: the worktrees share its store
    with Store.open(db) as store:
        for label, scope in MEMORIES.items():
            text = f"# {label}\n\nThe parser rewrite plan: tokens first, then the grammar."
            assert float(mock_vector(PROMPT) @ mock_vector(text)) >= 0.05
            store.remember("widgets", label, text, mock_vector(text), "mock", branch=scope)
    try:
        yield Repo(main, worktrees, env, db)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def named(env: dict[str, str], cwd: Path) -> set[str]:
    """The labels the prompt hook's nudge names for the recorded payload run in ``cwd``."""
    payload = json.loads(PAYLOAD.read_text())
    payload.update(cwd=str(cwd), prompt=PROMPT)
    result = run_hook(["flush-tools"], payload, env)
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    head = out.split(". Use memory_recall")[0]
    count = re.match(r"\[thatch\] (\d+) memor(?:y relates|ies relate) to this prompt", head)
    assert count is not None and "etc." not in head, out
    labels = set(QUOTED.findall(head))
    assert len(labels) == int(count[1]), out
    return labels


def test_branch_is_the_checked_out_branch_of_the_worktree(repo: Repo) -> None:
    """What the hook detects: each worktree's own branch; no branch outside git or when
    HEAD is detached (memory_recall without a branch: every branch)."""
    assert current_branch(repo.worktrees["feat-a"]) == "feat-a"
    assert current_branch(repo.worktrees["feat-b"] / "") == "feat-b"
    assert current_branch(repo.main) == "main"
    assert current_branch(repo.main.parent) is None
    detached = repo.main.parent / "detached"
    git(repo.main, "worktree", "add", "-q", "--detach", str(detached))
    assert current_branch(detached) is None


def expected(branch: str) -> set[str]:
    return {label for label, scoped in MEMORIES.items() if scoped in (branch, None)}


def test_cold_nudge_names_only_this_branch_and_unscoped_memories(repo: Repo) -> None:
    """No `thatch mcp` runs: the hook searches itself, with the worktree's branch."""
    assert not recall_scan.socket_path(repo.db, repo.env) or not os.path.exists(
        str(recall_scan.socket_path(repo.db, repo.env))
    )
    for branch, path in repo.worktrees.items():
        assert named(repo.env, path) == expected(branch)
    assert named(repo.env, repo.main) == expected("main")


def test_warm_nudge_names_only_this_branch_and_unscoped_memories(
    repo: Repo, tmp_path: Path
) -> None:
    """A running `thatch mcp` answers (the hook's own embedder address is dead, so only the
    warm path can name anything) and applies the branch the hook sent."""
    scan = recall_scan.socket_path(repo.db, repo.env)
    assert scan is not None
    hook_env = {**repo.env, "THATCH_EMBEDDER_ADDR": NO_EMBEDDER}
    with mcp_server(repo.env, tmp_path / "mcp.err") as process:
        wait_serving(process, scan, tmp_path / "mcp.err")
        for branch, path in repo.worktrees.items():
            assert named(hook_env, path) == expected(branch)
        assert named(hook_env, repo.main) == expected("main")


def test_warm_reply_without_the_branch_means_the_cold_path(short_tmp: Path) -> None:
    """A `thatch mcp` of a release that ignores "branch" answers for every branch: its
    reply (no "branch" echoed) is not used, the hook searches itself."""
    path = short_tmp / "old.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        server.settimeout(30)
        received: list[bytes] = []

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                received.append(conn.recv(65536))
                conn.sendall(b'{"labels": ["Parser rewrite plan on feat-b"], "blocks": []}\n')

        thread = threading.Thread(target=serve)
        thread.start()
        engines = {"prediction": None, "behavior": None}
        answer = recall_scan.request_scan(path, PROMPT, ["w"], 5, None, engines, branch="feat-a")
        thread.join(30)
    assert answer is None
    assert json.loads(received[0])["branch"] == "feat-a"
