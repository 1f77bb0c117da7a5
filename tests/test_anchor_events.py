"""Git events re-check code anchors off the prompt path (docs/tools.md §code-anchors): the
hooks of ``thatch setup --git-hooks`` (real processes run by real git) append a line per
checkout, merge or rewrite; the session start reads them, diffs the recorded commits and
stores each anchor's verdict; the prompt hook never runs ``git diff``. Real repositories,
a real SQLite file, the real hook processes."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fake_embedder import MODEL_ID, FakeEmbedder, bag_vector
from tests.support.hookrun import hook_env, run_hook
from tests.test_branch_hooks import payload
from tests.test_branch_lifecycle import git
from tests.test_code_anchors import PARSER
from thatch.frontend.anchors.capture import capture_anchors
from thatch.frontend.anchors.check import AnchorCheck
from thatch.frontend.anchors.events import MAX_READ, consume_git_events, parse_events
from thatch.frontend.git_refs import EVENTS_FILE
from thatch.frontend.store.memory_store import Store

STORE = "acme"  # no remote: the repository's directory name
PARSER_EDITED = PARSER.replace("value.strip()", "value")


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def new_repo(path: Path) -> Path:
    (path / "src").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "src" / "config.py").write_text(PARSER)
    (path / "README").write_text("acme\n")
    commit_all(path, "init")
    return path


def edited_on(repo: Path, branch: str) -> str:
    """``branch`` with parse_config edited and committed, then back on main."""
    git(repo, "checkout", "-q", "-b", branch)
    (repo / "src" / "config.py").write_text(PARSER_EDITED)
    head = commit_all(repo, "parse_config keeps spaces")
    git(repo, "checkout", "-q", "main")
    return head


def env_for(tmp_path: Path, repo: Path) -> dict[str, str]:
    env = hook_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    for name in ("CLAUDE_PROJECT_DIR", "CURSOR_PROJECT_DIR"):
        env.pop(name, None)
    env["THATCH_PROJECT_DIR"] = str(repo)
    return env


def save_pair(
    db: Path,
    repo: Path,
    env: dict[str, str],
    store_name: str = STORE,
    vector: Callable[[str], object] | None = None,
    model: str | None = None,
) -> None:
    """ "Deploy parser" anchored on parse_config, "Deploy callers" depending on it."""
    anchors = capture_anchors(["src/config.py:parse_config"], repo, env)
    with Store.open(db) as store:
        for label, anchored, related in (
            ("Deploy parser", anchors, []),
            ("Deploy callers", [], ["deploy-parser"]),
        ):
            content = f"# {label}\n\nTo deploy the service to production run make release."
            embedded = None if vector is None else vector(content)
            store.remember(
                store_name, label, content, embedded, model, anchors=anchored, related=related
            )


def status(db: Path) -> list[tuple[str, str, bool]]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT slug, status, checked_at FROM thatch_anchors ORDER BY 1")
        return [(slug, state, checked is not None) for slug, state, checked in rows]
    finally:
        conn.close()


def install_hooks(repo: Path, env: dict[str, str]) -> None:
    result = run_hook(["setup", "--git-hooks"], None, env, cwd=repo)
    assert result.returncode == 0, result.stderr


def events(repo: Path) -> list[str]:
    return (repo / ".git" / EVENTS_FILE).read_text().splitlines()


def session_start(repo: Path, env: dict[str, str]) -> None:
    start = run_hook(["reminder"], payload("claude-SessionStart-startup.json", repo), env)
    assert start.returncode == 0, start.stderr


@pytest.fixture
def git_log(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A ``git`` first on PATH that logs its arguments, then runs the real one."""
    real = shutil.which("git")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "git.log"
    shim = bin_dir / "git"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >>"{log}"\nexec "{real}" "$@"\n')
    shim.chmod(0o755)
    yield bin_dir, log


def test_a_checkout_is_checked_at_session_start_never_by_the_prompt_hook(
    tmp_path: Path, mock_embedder: object, git_log: tuple[Path, Path]
) -> None:
    """After ``git checkout`` of a branch that edited the anchored function, the prompt
    hook recalls both memories without running ``git diff`` or storing a verdict (its
    marks come from its stat check, tests/test_code_anchors.py); the session start
    consumes the hook's event and stores ``changed``, which the dependent inherits;
    checking out main again stores ``fresh``. The memories are global's: the hygiene
    pass's own re-check covers the project's store only, so the verdicts are the events'."""
    from tests.test_recall_scan import flush
    from thatch.embedder.models.mock import mock_vector

    repo = new_repo(tmp_path / STORE)
    feat = edited_on(repo, "feat")
    main = git(repo, "rev-parse", "main")
    env = env_for(tmp_path, repo)
    env["THATCH_EMBEDDER_ADDR"] = mock_embedder.address  # type: ignore[attr-defined]
    env["THATCH_RECALL_THRESHOLD"] = "0.05"
    db = Path(env["THATCH_DB_PATH"])
    save_pair(db, repo, env, "global", mock_vector, "mock")
    install_hooks(repo, env)

    git(repo, "checkout", "-q", "feat")
    assert events(repo)[-1] == f"post-checkout {main} {feat} {os.path.realpath(repo)}"

    bin_dir, log = git_log
    shimmed = {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}
    nudge = flush(shimmed)
    assert '"Deploy parser"' in nudge and '"Deploy callers"' in nudge
    assert log.exists()  # the shim is used: the prompt hook syncs branches with git
    assert not [line for line in log.read_text().splitlines() if line.startswith("diff")]
    assert status(db) == [("deploy-parser", "fresh", False)]

    session_start(repo, shimmed)
    assert status(db) == [("deploy-parser", "changed", True)]
    assert f"diff --name-only -z --no-renames {main} {feat} --" in log.read_text()
    keys = [("global", "deploy-parser"), ("global", "deploy-callers")]
    with Store.open(db) as store:
        drift = unhurried().drift(store, keys)
    assert {key: (found.paths, found.via) for key, found in drift.items()} == {
        keys[0]: (("src/config.py",), None),
        keys[1]: (("src/config.py",), "Deploy parser"),
    }

    git(repo, "checkout", "-q", "main")
    session_start(repo, env)
    assert status(db) == [("deploy-parser", "fresh", True)]
    # Consumed once: a later session start reads nothing again.
    before = log.read_text().count("diff --name-only")
    session_start(repo, shimmed)
    assert log.read_text().count("diff --name-only") == before


def consume(store: Store, repo: Path, env: dict[str, str]) -> int:
    return consume_git_events(store, repo, env, unhurried())


def unhurried() -> AnchorCheck:
    """A check whose clock stands still: no budget runs out on a loaded machine."""
    return AnchorCheck(clock=lambda: 0.0)


def test_a_merge_marks_the_memory_and_its_dependent(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / STORE)
    edited_on(repo, "feat")
    main = git(repo, "rev-parse", "main")
    env = env_for(tmp_path, repo)
    db = Path(env["THATCH_DB_PATH"])
    save_pair(db, repo, env)
    install_hooks(repo, env)
    git(repo, "merge", "-q", "--no-ff", "--no-edit", "feat")
    assert f"post-merge {main} - {os.path.realpath(repo)}" in events(repo)
    with Store.open(db) as store:
        assert consume(store, repo, env) == 1
        drift = unhurried().drift(store, [(STORE, "deploy-callers")])
    assert status(db) == [("deploy-parser", "changed", True)]
    assert drift[(STORE, "deploy-callers")].via == "Deploy parser"


@pytest.mark.parametrize("rebase", [False, True])
def test_a_pull_marks_the_anchors_of_the_clone(tmp_path: Path, rebase: bool) -> None:
    """``git pull`` (a merge: post-merge; ``--rebase`` over a local commit: post-checkout
    and post-rewrite) of an upstream edit to the anchored function, in a linked worktree
    of the clone (its own git dir: ``$GIT_DIR`` in the hook)."""
    upstream = new_repo(tmp_path / "upstream")
    git(tmp_path, "clone", "-q", str(upstream), "clone")
    clone = tmp_path / "clone"
    git(clone, "worktree", "add", "-q", str(tmp_path / STORE), "-b", "work", "origin/main")
    work = tmp_path / STORE
    git(work, "branch", "-q", "--set-upstream-to", "origin/main")
    env = env_for(tmp_path, work)
    db = Path(env["THATCH_DB_PATH"])
    save_pair(db, work, env)
    install_hooks(work, env)
    (upstream / "src" / "config.py").write_text(PARSER_EDITED)
    commit_all(upstream, "upstream edit")
    if rebase:
        (work / "NOTES").write_text("local\n")
        commit_all(work, "local commit")
        local = git(work, "rev-parse", "HEAD")
        git(work, "pull", "-q", "--rebase")
        assert f"post-rewrite {local} - {os.path.realpath(work)}" in events(clone)
        assert any(line.startswith("post-checkout ") for line in events(clone))
    else:
        before = git(work, "rev-parse", "HEAD")
        git(work, "pull", "-q", "--no-rebase")
        assert f"post-merge {before} - {os.path.realpath(work)}" in events(clone)
    with Store.open(db) as store:
        consume(store, work, env)
    assert status(db) == [("deploy-parser", "changed", True)]


def test_hostile_event_lines_are_ignored_silently(tmp_path: Path) -> None:
    """Garbage, a line past the read size, bad commits, shell text, relative or traversing
    paths, control characters and another repository's checkout mark nothing, run no
    command and print nothing; the valid line among them still counts."""
    repo = new_repo(tmp_path / STORE)
    other = new_repo(tmp_path / "other")
    feat = edited_on(repo, "feat")
    env = env_for(tmp_path, repo)
    db = Path(env["THATCH_DB_PATH"])
    save_pair(db, repo, env)
    anchors = capture_anchors(["src/config.py"], other, env)
    with Store.open(db) as store:
        store.remember("other", "O", "# O\n\nx", None, None, anchors=anchors)
    (other / "src" / "config.py").write_text("changed\n")
    main = git(repo, "rev-parse", "main")
    root = os.path.realpath(repo)
    pwned = tmp_path / "pwned"
    hostile = [
        b"\x00\xff garbage \xfe",
        b"post-checkout",
        b"post-checkout " + main.encode() + b" " + feat.encode(),
        f"post-checkout $(touch {pwned}) {feat} {root}".encode(),
        f"post-checkout --output={pwned} {feat} {root}".encode(),
        f"post-checkout {main} {feat} src/../{STORE}".encode(),
        f"post-checkout {main} {feat} {root}/src".encode(),
        f"post-checkout {main} {feat} {root}\x1b[2J".encode(),
        f"post-checkout - - {os.path.realpath(other)}".encode(),
        f"post-checkout - - {tmp_path}/../../etc".encode(),
        f"pre-commit - - {root}".encode(),
        b"post-merge " + b"a" * 40 + b" - /" + b"x" * 5000,
    ]
    path = repo / ".git" / EVENTS_FILE
    path.write_bytes(b"\n".join(hostile) + b"\n")
    start = run_hook(["reminder"], payload("claude-SessionStart-startup.json", repo), env)
    assert start.returncode == 0 and start.stderr == b""
    assert b"garbage" not in start.stdout and b"post-" not in start.stdout
    assert status(db) == [("deploy-parser", "fresh", False), ("o", "fresh", False)]
    assert not pwned.exists()
    assert not (repo / "--output").exists()
    # A line longer than a whole read, then a good one: read by the next passes (the file
    # edited meanwhile: its verdict is the re-check's).
    (repo / "src" / "config.py").write_text(PARSER_EDITED)
    with path.open("ab") as handle:
        handle.write(b"y" * (MAX_READ + 10) + f"\npost-checkout {main} {feat} {root}\n".encode())
    with Store.open(db) as store:
        assert [consume(store, repo, env) for _ in range(3)] == [0, 1, 0]
    assert status(db) == [("deploy-parser", "changed", True), ("o", "fresh", False)]
    assert [event.worktree for event in parse_events(b"\n".join(hostile))] == [
        f"{root}/src",
        os.path.realpath(other),
        f"{tmp_path}/../../etc",
    ]


def test_unknown_commits_recheck_the_whole_checkout_and_unreadable_stays_unverifiable(
    tmp_path: Path,
) -> None:
    """A commit git does not know (a pruned one, a clone's all-zero old) re-checks every
    anchor of the checkout; a file too large to read at check time is "unverifiable",
    never "changed"."""
    repo = new_repo(tmp_path / STORE)
    (repo / "big.bin").write_bytes(b"x" * 100)
    commit_all(repo, "big")
    env = env_for(tmp_path, repo)
    db = Path(env["THATCH_DB_PATH"])
    save_pair(db, repo, env)
    anchors = capture_anchors(["big.bin"], repo, env)
    with Store.open(db) as store:
        store.remember(STORE, "Big", "# Big\n\nx", None, None, anchors=anchors)
    (repo / "big.bin").write_bytes(b"y" * (3 * 1024 * 1024))
    (repo / "src" / "config.py").write_text(PARSER_EDITED)
    path = repo / ".git" / EVENTS_FILE
    path.write_text(f"post-checkout {'0' * 40} {'1' * 40} {os.path.realpath(repo)}\n")
    with Store.open(db) as store:
        assert consume(store, repo, env) == 2
    assert status(db) == [("big", "unverifiable", True), ("deploy-parser", "changed", True)]


def test_a_truncated_events_file_is_read_from_its_start(tmp_path: Path) -> None:
    """The session start trims the file: an offset past its end, or bytes before it that
    changed, start over (the event written after the trim is not skipped) and re-check
    the checkout's anchors (what the lines cut away said is unknown)."""
    repo = new_repo(tmp_path / STORE)
    feat = edited_on(repo, "feat")
    main = git(repo, "rev-parse", "main")
    env = env_for(tmp_path, repo)
    db = Path(env["THATCH_DB_PATH"])
    save_pair(db, repo, env)
    path = repo / ".git" / EVENTS_FILE
    filler = "reference-transaction refs/heads/x " + "0" * 40 + "\n"
    path.write_text(filler * 20)
    with Store.open(db) as store:
        assert consume(store, repo, env) == 0
        git(repo, "checkout", "-q", "feat")
        path.write_text(f"post-checkout {main} {feat} {os.path.realpath(repo)}\n" + filler * 30)
        assert consume(store, repo, env) == 1
    assert status(db) == [("deploy-parser", "changed", True)]


def test_without_hooks_nothing_is_stored_and_recall_still_marks(tmp_path: Path) -> None:
    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.memory_tools import Tools

    repo = new_repo(tmp_path / STORE)
    edited_on(repo, "feat")
    env = env_for(tmp_path, repo)
    db = Path(env["THATCH_DB_PATH"])
    save_pair(db, repo, env, STORE, lambda text: bag_vector(text, FakeEmbedder.dim), MODEL_ID)
    git(repo, "checkout", "-q", "feat")
    with Store.open(db) as store:
        assert consume(store, repo, env) == 0
    assert not (tmp_path / "cache" / "thatch" / "anchor-events").exists()
    with ToolContext(
        store=Store.open(db),
        embedder=FakeEmbedder(),  # type: ignore[arg-type]
        project_store=STORE,
        project_dir=repo,
        host=None,
        env=env,
        queue_dir=tmp_path / "queue",
    ) as ctx:
        result = Tools(ctx).call("memory_recall", {"query": "deploy service"})
    assert result.text.count("[code changed since saved: src/config.py") == 2
    assert status(db) == [("deploy-parser", "fresh", False)]


def test_the_session_start_trims_only_what_the_anchors_pass_has_read(
    tmp_path: Path, mock_embedder: object
) -> None:
    """The events file past 64 KiB at a session start whose pass never read it (no offset
    yet): the real hook's checkout line is read, not trimmed away first; once a pass has
    read it all, the next session start empties it; past 1 MiB it is emptied whatever
    was read, saying so (the next pass re-checks the checkout). The memories are
    global's, so the verdicts are the events' (as above)."""
    from thatch.embedder.models.mock import mock_vector
    from thatch.frontend.branch_sync import EVENTS_KEPT_BYTES, EVENTS_MAX_BYTES

    repo = new_repo(tmp_path / STORE)
    feat = edited_on(repo, "feat")
    env = env_for(tmp_path, repo)
    env["THATCH_EMBEDDER_ADDR"] = mock_embedder.address  # type: ignore[attr-defined]
    db = Path(env["THATCH_DB_PATH"])
    save_pair(db, repo, env, "global", mock_vector, "mock")
    install_hooks(repo, env)
    path = repo / ".git" / EVENTS_FILE
    filler = "reference-transaction refs/heads/x " + "0" * 40 + "\n"
    with open(path, "a") as handle:
        handle.write(filler * (EVENTS_KEPT_BYTES // len(filler) + 1))
    git(repo, "checkout", "-q", "feat")
    assert events(repo)[-1].startswith("post-checkout ")
    assert path.stat().st_size > EVENTS_KEPT_BYTES

    session_start(repo, env)
    assert status(db) == [("deploy-parser", "changed", True)]
    assert path.stat().st_size > EVENTS_KEPT_BYTES  # kept: this pass read it, the next trims

    session_start(repo, env)
    assert path.stat().st_size == 0

    git(repo, "checkout", "-q", "main")
    main = git(repo, "rev-parse", "main")
    assert events(repo) == [f"post-checkout {feat} {main} {os.path.realpath(repo)}"]
    with Store.open(db) as store:  # as if that event's verdict had not been stored yet
        store.set_anchor_status([(a, "changed") for a in store.anchors_under(str(repo))])
    with open(path, "a") as handle:
        handle.write(filler * (EVENTS_MAX_BYTES // len(filler) + 1))
    session_start(repo, env)
    # Cut unread past 1 MiB, saying so: the pass re-checks the checkout (its offset, 0
    # after the last cut, cannot tell by itself).
    assert path.read_bytes() == b"cut\n"
    assert status(db) == [("deploy-parser", "fresh", True)]
