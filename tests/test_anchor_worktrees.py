"""Anchors saved in a git worktree that is gone since (docs/database.md §code-anchors): the
main checkout of the same repository that recalls or checks them takes them over when it
holds their commit merged and their file as saved; another repository's checkout never
does, nor does a linked worktree, nor does any checkout while git lists the worktree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.fake_embedder import rows
from tests.test_code_anchors import MARKER, PARSER, context, edit, git, make_repo, ok, run_hygiene
from thatch.frontend.tools.memory_tools import Tools

pytestmark = pytest.mark.parametrize("minilm_server", ["int8"], indirect=True)

CONTENT = "parse_config splits the config file's key=value lines into a dict."
QUERY = {"query": "how is the config file parsed into key value pairs?"}


def parser_repo(path: Path) -> Path:
    """A repository at ``path`` whose src/config.py holds ``parse_config``."""
    make_repo(path, {"README": f"{path.name}\n"})
    (path / "src").mkdir()
    (path / "src" / "config.py").write_text(PARSER)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "config")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return parser_repo(tmp_path / "acme")


@contextmanager
def tools_in(tmp_path: Path, directory: Path, server: object) -> Iterator[Tools]:
    """Tools run from ``directory`` (one database for all), on the real MiniLM embedder."""
    from thatch.embedder.client.embedder_client import EmbedderClient

    client = EmbedderClient(server.address, autostart=False)  # type: ignore[attr-defined]
    with context(tmp_path, directory, client) as ctx:
        yield Tools(ctx)


def saved_in_worktree(tmp_path: Path, repo: Path, server: object) -> Path:
    """A worktree of ``repo`` on branch ``feature``, with a commit of its own, where the
    memory anchored to ``parse_config`` is saved. The worktree's path."""
    worktree = tmp_path / "acme-feature"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(worktree))
    edit(worktree / "src" / "config.py", '"""The config parser."""', '"""Config parsing."""')
    git(worktree, "commit", "-q", "-am", "docstring")
    with tools_in(tmp_path, worktree, server) as tools:
        ok(
            tools,
            "memory_remember",
            {
                "label": "Config parsing",
                "content": CONTENT,
                "anchors": ["src/config.py:parse_config"],
            },
        )
    return worktree


def merged_and_removed(repo: Path, worktree: Path) -> None:
    """The usual end of a worktree: its branch merged, the worktree and branch removed."""
    git(repo, "merge", "-q", "feature")
    git(repo, "worktree", "remove", str(worktree))
    git(repo, "branch", "-q", "-d", "feature")


def roots(tmp_path: Path) -> list[str]:
    return [row[0] for row in rows(tmp_path / "thatch.db", "SELECT root FROM thatch_anchors")]


def test_an_edit_in_the_main_checkout_marks_a_memory_of_a_removed_worktree(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    worktree = saved_in_worktree(tmp_path, repo, minilm_server)
    merged_and_removed(repo, worktree)
    edit(repo / "src" / "config.py", "value.strip()", "value")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        text = ok(tools, "memory_recall", QUERY)
    found = MARKER.search(text)
    assert found is not None and found.group(1) == "src/config.py", text
    assert roots(tmp_path) == [os.path.realpath(repo)]


def test_unchanged_code_of_a_removed_worktree_is_taken_over_unmarked(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """The session start's pass (hygiene) takes the anchors over once, the prompt path
    then reads the new root; the merged code as saved marks nothing."""
    worktree = saved_in_worktree(tmp_path, repo, minilm_server)
    merged_and_removed(repo, worktree)
    with tools_in(tmp_path, repo, minilm_server) as tools:
        assert run_hygiene(tools.ctx, repo) == {}
        assert roots(tmp_path) == [os.path.realpath(repo)]
        text = ok(tools, "memory_recall", QUERY)
    assert "# Config parsing" in text and "code changed" not in text


def test_another_repository_never_takes_over_a_removed_worktrees_anchors(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """Recalled (and checked) from a checkout of another repository holding the same file,
    edited: the anchor stays where it was saved, unverifiable, unmarked."""
    worktree = saved_in_worktree(tmp_path, repo, minilm_server)
    merged_and_removed(repo, worktree)
    other = parser_repo(tmp_path / "other")
    edit(other / "src" / "config.py", "value.strip()", "value")
    with tools_in(tmp_path, other, minilm_server) as tools:
        text = ok(tools, "memory_recall", QUERY)
        assert "# Config parsing" in text and "code changed" not in text
        assert run_hygiene(tools.ctx, other) == {}
    assert roots(tmp_path) == [os.path.realpath(worktree)]


def test_a_worktree_that_still_exists_keeps_its_anchors(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """Recalled from the main checkout, whose code differs: the anchors stay on the
    living worktree, checked there (moving them between two living checkouts is not
    this pass's to decide)."""
    worktree = saved_in_worktree(tmp_path, repo, minilm_server)
    edit(repo / "src" / "config.py", "value.strip()", "value")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        assert run_hygiene(tools.ctx, repo) == {}
        text = ok(tools, "memory_recall", QUERY)
    assert "# Config parsing" in text and "code changed" not in text
    assert roots(tmp_path) == [os.path.realpath(worktree)]


def worktree_with_commit(tmp_path: Path, repo: Path, server: object, path: Path) -> Path:
    """A worktree of ``repo`` at ``path`` on branch ``feature`` whose own commit lowercases
    the values, the memory anchored to ``parse_config`` saved there."""
    git(repo, "worktree", "add", "-q", "-b", "feature", str(path))
    edit(path / "src" / "config.py", "value.strip()", "value.strip().lower()")
    git(path, "commit", "-q", "-am", "lowercase values")
    with tools_in(tmp_path, path, server) as tools:
        ok(
            tools,
            "memory_remember",
            {
                "label": "Config parsing",
                "content": CONTENT,
                "anchors": ["src/config.py:parse_config"],
            },
        )
    return path


def deleted_project_rows(tmp_path: Path, root: str, count: int) -> None:
    """``count`` anchors of a project deleted long ago, each captured at its own commit
    (unknown to every repository here)."""
    import hashlib
    import sqlite3

    with sqlite3.connect(tmp_path / "thatch.db") as conn:
        for i in range(count):
            commit = hashlib.sha1(f"{root}{i}".encode()).hexdigest()
            conn.execute(
                "INSERT INTO thatch_anchors (store, slug, seq, root, path, blob, commit_id) "
                "VALUES ('old', ?, 0, ?, 'x.py', ?, ?)",
                (f"m{i}", root, commit, commit),
            )
    conn.close()


@pytest.fixture
def git_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The arguments of every git process thatch runs from now on."""
    from thatch.frontend import project

    calls: list[list[str]] = []
    real = project.git_result

    def counting(directory: Path, env: object, *args: str, **options: object) -> object:
        calls.append(list(args))
        return real(directory, env, *args, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(project, "git_result", counting)
    return calls


def test_a_removed_worktrees_unmerged_branch_stays_unverifiable(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """The branch kept unmerged (a pull request still open): the main checkout lacks its
    code, so taking the anchor over would mark code as changed that never was."""
    worktree = worktree_with_commit(tmp_path, repo, minilm_server, tmp_path / "acme-feature")
    git(repo, "worktree", "remove", str(worktree))
    with tools_in(tmp_path, repo, minilm_server) as tools:
        assert run_hygiene(tools.ctx, repo) == {}
        text = ok(tools, "memory_recall", QUERY)
    assert "# Config parsing" in text and "code changed" not in text
    assert roots(tmp_path) == [os.path.realpath(worktree)]


def test_a_sibling_worktree_branched_before_the_merge_leaves_them_to_the_main_checkout(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    sibling = tmp_path / "acme-other"
    git(repo, "worktree", "add", "-q", "-b", "other", str(sibling))
    worktree = worktree_with_commit(tmp_path, repo, minilm_server, tmp_path / "acme-feature")
    git(repo, "merge", "-q", "feature")
    git(repo, "worktree", "remove", str(worktree))
    with tools_in(tmp_path, sibling, minilm_server) as tools:
        assert run_hygiene(tools.ctx, sibling) == {}
        assert "code changed" not in ok(tools, "memory_recall", QUERY)
    assert roots(tmp_path) == [os.path.realpath(worktree)]
    with tools_in(tmp_path, repo, minilm_server) as tools:
        assert run_hygiene(tools.ctx, repo) == {}
        assert "code changed" not in ok(tools, "memory_recall", QUERY)
    assert roots(tmp_path) == [os.path.realpath(repo)]


def test_a_reused_worktree_path_hands_no_repository_anothers_anchors(
    tmp_path: Path, minilm_server: object
) -> None:
    """One path, a worktree of alpha and then of beta, both removed: beta's anchors go
    to beta; alpha's stay unverifiable (the path last named beta's main checkout), and
    never go to beta."""
    alpha, beta = parser_repo(tmp_path / "alpha"), parser_repo(tmp_path / "beta")
    path = tmp_path / "wt-fix"
    for repo in (alpha, beta):
        git(repo, "worktree", "add", "-q", "-b", "fix", str(path))
        with tools_in(tmp_path, path, minilm_server) as tools:
            ok(
                tools,
                "memory_remember",
                {"label": f"{repo.name} fix", "content": repo.name, "anchors": ["README"]},
            )
        git(repo, "worktree", "remove", str(path))
    by_slug = "SELECT slug, root FROM thatch_anchors ORDER BY slug"
    for repo in (alpha, beta):
        with tools_in(tmp_path, repo, minilm_server) as tools:
            run_hygiene(tools.ctx, repo)
        taken = {str(alpha): [], str(beta): ["beta-fix"]}[str(repo)]
        assert rows(tmp_path / "thatch.db", by_slug) == [
            ("alpha-fix", os.path.realpath(path)),
            ("beta-fix", os.path.realpath(beta) if taken else os.path.realpath(path)),
        ]


def test_a_deleted_project_is_asked_about_once_per_head(
    tmp_path: Path, repo: Path, minilm_server: object, git_calls: list[list[str]]
) -> None:
    """Its anchors no checkout can claim (it was no worktree of this one): no git process
    asks about them, at a session start, in a recall returning them, or after this
    checkout's HEAD moves."""
    scratch = parser_repo(tmp_path / "scratch")
    with tools_in(tmp_path, scratch, minilm_server) as tools:
        ok(tools, "memory_remember", {"label": "Config parsing", "content": CONTENT,
                                      "anchors": ["src/config.py:parse_config"]})  # fmt: skip
    import shutil

    shutil.rmtree(scratch)
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
        assert "rev-list" not in [call[0] for call in git_calls]
        git_calls.clear()
        run_hygiene(tools.ctx, repo)
        assert "# Config parsing" in ok(tools, "memory_recall", QUERY)
        assert git_calls == []
        git(repo, "commit", "-q", "--allow-empty", "-m", "later")
        run_hygiene(tools.ctx, repo)
        assert "rev-list" not in [call[0] for call in git_calls]
    assert roots(tmp_path) == [os.path.realpath(scratch)]


def test_roots_asked_about_at_this_head_are_not_looked_at_again(
    tmp_path: Path, repo: Path, minilm_server: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Roots nothing can claim stay for good: a pass at the same HEAD looks none of them up
    on disk (a stat walk each, per pass, grew with them: 0.5 s at 10,000), and none that
    was no worktree of this checkout's is looked up at all."""
    import sqlite3

    from thatch.frontend.anchors import recheck

    looked: list[str] = []
    real = recheck._is_checkout

    def counting(root: str) -> bool:
        looked.append(root)
        return real(root)

    monkeypatch.setattr(recheck, "_is_checkout", counting)
    with tools_in(tmp_path, repo, minilm_server) as tools:
        with sqlite3.connect(tmp_path / "thatch.db") as conn:
            conn.executemany(
                "INSERT INTO thatch_anchors (store, slug, seq, root, path, blob, commit_id) "
                "VALUES ('old', ?, 0, ?, 'x.py', ?, ?)",
                [(f"m{i}", str(tmp_path / f"gone-{i}"), "ab" * 20, "cd" * 20) for i in range(20)],
            )
            conn.executemany(  # the first ten were worktrees of this checkout
                "INSERT INTO repo_paths (worktree_path, main_path, repo_slug, resolved_at) "
                "VALUES (?, ?, 'acme', 0)",
                [(str(tmp_path / f"gone-{i}"), os.path.realpath(repo)) for i in range(10)],
            )
        conn.close()
        run_hygiene(tools.ctx, repo)
        assert sorted(set(looked)) == sorted(str(tmp_path / f"gone-{i}") for i in range(10))
        looked.clear()
        run_hygiene(tools.ctx, repo)
    assert looked == []


def test_many_commits_of_gone_checkouts_shut_no_repository_out(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """A deleted project's 64 commits sort first: the merged worktree's anchors are still
    taken over."""
    worktree = worktree_with_commit(tmp_path, repo, minilm_server, tmp_path / "acme-feature")
    git(repo, "merge", "-q", "feature")
    git(repo, "worktree", "remove", str(worktree))
    deleted_project_rows(tmp_path, "/a-deleted-project", 64)
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
    by_slug = "SELECT DISTINCT root FROM thatch_anchors WHERE store = 'acme'"
    assert rows(tmp_path / "thatch.db", by_slug) == [(os.path.realpath(repo),)]


def test_a_locked_worktree_on_an_unplugged_disk_keeps_its_anchors(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    disk = tmp_path / "usb"
    disk.mkdir()
    worktree = worktree_with_commit(tmp_path, repo, minilm_server, disk / "acme-feature")
    git(repo, "merge", "-q", "feature")
    git(repo, "worktree", "lock", "--reason", "on a portable disk", str(worktree))
    disk.rename(tmp_path / "usb-unplugged")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
    assert roots(tmp_path) == [os.path.realpath(worktree)]


def test_a_partial_clone_fetches_nothing_for_commits_it_lacks(
    tmp_path: Path, minilm_server: object
) -> None:
    """A blob-less clone asks its remote for every object it lacks: the take-over must not
    (a network round trip per session start, for a deleted project's commits)."""
    upstream = parser_repo(tmp_path / "upstream")
    git(upstream, "config", "uploadpack.allowFilter", "true")
    git(tmp_path, "clone", "-q", "--filter=blob:none", f"file://{upstream}", "acme")
    repo = tmp_path / "acme"
    fetched = tmp_path / "fetched"
    git(repo, "config", "remote.origin.uploadpack", f"echo >> '{fetched}'; git-upload-pack")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        ok(tools, "memory_remember", {"label": "Readme", "content": "x", "anchors": ["README"]})
        deleted_project_rows(tmp_path, "/a-deleted-project", 3)
        run_hygiene(tools.ctx, repo)
    assert not fetched.exists()


def test_anchors_taken_over_follow_the_renames_since_their_commit(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """Their commit kept (merged, so known here): the file renamed in the main checkout
    after the merge is followed, not mistaken for a rewritten history."""
    worktree = worktree_with_commit(tmp_path, repo, minilm_server, tmp_path / "acme-feature")
    git(repo, "merge", "-q", "feature")
    git(repo, "worktree", "remove", str(worktree))
    git(repo, "mv", "src/config.py", "src/settings.py")
    git(repo, "commit", "-q", "-m", "rename")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        assert run_hygiene(tools.ctx, repo) == {}
        assert "code changed" not in ok(tools, "memory_recall", QUERY)
    assert rows(tmp_path / "thatch.db", "SELECT root, path FROM thatch_anchors") == [
        (os.path.realpath(repo), "src/settings.py")
    ]


def remember(tools: Tools, label: str, content: str = CONTENT) -> None:
    ok(tools, "memory_remember",
       {"label": label, "content": content, "anchors": ["src/config.py:parse_config"]})  # fmt: skip


def test_a_memory_saved_on_uncommitted_edits_of_a_removed_worktree_stays_unverifiable(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """Its commit is the branch point, merged by definition; but the main checkout never
    held the edits it was saved on: taken over, it would read as code changed."""
    worktree = tmp_path / "acme-feature"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(worktree))
    edit(worktree / "src" / "config.py", "value.strip()", "value.strip().lower()")
    with tools_in(tmp_path, worktree, minilm_server) as tools:
        remember(tools, "Config parsing")
    git(repo, "worktree", "remove", "--force", str(worktree))
    git(repo, "branch", "-q", "-D", "feature")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        assert run_hygiene(tools.ctx, repo) == {}
        text = ok(tools, "memory_recall", QUERY)
    assert "# Config parsing" in text and "code changed" not in text
    assert roots(tmp_path) == [os.path.realpath(worktree)]


def test_a_living_linked_worktree_never_claims_a_removed_worktrees_anchors(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """Branched after the merge, so the commit is merged there too: but its own branch may
    be abandoned with the anchors on it. The main checkout takes them."""
    worktree = saved_in_worktree(tmp_path, repo, minilm_server)
    merged_and_removed(repo, worktree)
    sibling = tmp_path / "acme-other"
    git(repo, "worktree", "add", "-q", "-b", "other", str(sibling))
    edit(sibling / "src" / "config.py", "value.strip()", "value.strip().lower()")
    with tools_in(tmp_path, sibling, minilm_server) as tools:
        run_hygiene(tools.ctx, sibling)
        assert "code changed" not in ok(tools, "memory_recall", QUERY)
    assert roots(tmp_path) == [os.path.realpath(worktree)]
    with tools_in(tmp_path, repo, minilm_server) as tools:
        assert run_hygiene(tools.ctx, repo) == {}
    assert roots(tmp_path) == [os.path.realpath(repo)]


def old_git(tmp_path: Path, refused: str) -> dict[str, str]:
    """An environment whose git refuses, as a usage error, any ``worktree list`` holding
    ``refused`` (git before 2.36 has no ``-z``), and logs every call into ``git.log``."""
    import shutil

    bin_dir = tmp_path / "old-git"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> '{tmp_path / 'git.log'}'\n"
        f'case "$*" in "worktree list"*{refused}*) echo usage >&2; exit 129;; esac\n'
        f"exec '{shutil.which('git')}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def test_a_git_without_worktree_list_z_still_hands_over_merged_anchors(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    from thatch.frontend.anchors.recheck import follow_renames

    worktree = saved_in_worktree(tmp_path, repo, minilm_server)
    merged_and_removed(repo, worktree)
    env = old_git(tmp_path, "-z")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        follow_renames(tools.ctx.store, env, repo)
    assert roots(tmp_path) == [os.path.realpath(repo)]


def test_a_git_that_cannot_list_worktrees_is_asked_once_per_head(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """Nothing moves (a worktree it cannot list may still be there), and the same git is
    not asked again at every pass."""
    from thatch.frontend.anchors.recheck import follow_renames

    worktree = saved_in_worktree(tmp_path, repo, minilm_server)
    merged_and_removed(repo, worktree)
    env = old_git(tmp_path, "porcelain")
    log = tmp_path / "git.log"
    with tools_in(tmp_path, repo, minilm_server) as tools:
        follow_renames(tools.ctx.store, env, repo)
        assert "worktree list" in log.read_text()
        log.write_text("")
        follow_renames(tools.ctx.store, env, repo)
    assert "worktree" not in log.read_text()
    assert roots(tmp_path) == [os.path.realpath(worktree)]


def test_a_database_without_the_asked_table_keeps_the_recalls_markers(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """A read-only file an earlier release migrated lacks thatch_gone_checkouts: the
    question about the gone checkout fails, the code changed in the main checkout is
    still marked."""
    import sqlite3

    worktree = tmp_path / "acme-feature"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(worktree))
    git(worktree, "commit", "-q", "--allow-empty", "-m", "wip")
    with tools_in(tmp_path, worktree, minilm_server) as tools:
        remember(tools, "Feature config parsing")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        remember(tools, "Config parsing", CONTENT + " Lines split on the first '='.")
    git(repo, "worktree", "remove", str(worktree))
    edit(repo / "src" / "config.py", "value.strip()", "value")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        with sqlite3.connect(tmp_path / "thatch.db", isolation_level=None) as conn:
            conn.execute("DROP TABLE thatch_gone_checkouts")
        conn.close()
        text = ok(tools, "memory_recall", {**QUERY, "limit": 5})
    assert "# Feature config parsing" in text
    found = MARKER.findall(text)
    assert found == ["src/config.py"], text


def test_an_anchor_saved_before_the_first_commit_runs_no_git_at_recall(
    tmp_path: Path, minilm_server: object, git_calls: list[list[str]]
) -> None:
    """Its checkout's directory gone (the project moved, then committed), with no commit
    no pass can move it: a recall returning it runs no rename pass (which would diff the
    anchors of the checkout it runs in)."""
    project = tmp_path / "acme"
    (project / "src").mkdir(parents=True)
    git(project, "init", "-q", "-b", "main")
    (project / "src" / "config.py").write_text(PARSER)
    with tools_in(tmp_path, project, minilm_server) as tools:
        remember(tools, "Config parsing")
    moved = tmp_path / "acme-moved"
    project.rename(moved)
    git(moved, "add", ".")
    git(moved, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "first")
    with tools_in(tmp_path, moved, minilm_server) as tools:
        remember(tools, "Config reader")
    git_calls.clear()
    with tools_in(tmp_path, moved, minilm_server) as tools:
        assert "# Config parsing" in ok(tools, "memory_recall", QUERY)
    assert git_calls == []


def test_an_unlocked_worktree_on_an_unplugged_disk_keeps_its_anchors(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """git lists it as prunable, yet its directory comes back with the disk: only
    ``git worktree remove`` or ``prune`` make it gone."""
    disk = tmp_path / "usb"
    disk.mkdir()
    worktree = worktree_with_commit(tmp_path, repo, minilm_server, disk / "acme-feature")
    git(repo, "merge", "-q", "feature")
    disk.rename(tmp_path / "usb-unplugged")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
    assert roots(tmp_path) == [os.path.realpath(worktree)]


def test_a_sparse_main_checkout_takes_over_no_file_it_does_not_hold(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """HEAD holds the file but the checkout does not (sparse): moved there, the anchor
    would read as gone, marked though nobody changed the code."""
    worktree = worktree_with_commit(tmp_path, repo, minilm_server, tmp_path / "acme-feature")
    merged_and_removed(repo, worktree)
    (repo / "docs").mkdir()
    (repo / "docs" / "a.md").write_text("a\n")
    git(repo, "add", "docs")
    git(repo, "commit", "-q", "-m", "docs")
    git(repo, "sparse-checkout", "set", "docs")
    assert not (repo / "src" / "config.py").exists()
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
        assert "code changed" not in ok(tools, "memory_recall", QUERY)
    assert roots(tmp_path) == [os.path.realpath(worktree)]


def test_a_missing_clone_leaves_its_anchors_to_no_other_clone(
    tmp_path: Path, minilm_server: object
) -> None:
    """A clone whose disk is unplugged looks gone; another clone holding its merged commits
    must not take its anchors: they were saved on that clone's code, not this one's."""
    disk = tmp_path / "usb"
    disk.mkdir()
    first = parser_repo(disk / "acme")
    with tools_in(tmp_path, first, minilm_server) as tools:
        remember(tools, "Config parsing")
    second = tmp_path / "acme-clone"
    git(tmp_path, "clone", "-q", str(first), str(second))
    disk.rename(tmp_path / "usb-unplugged")
    with tools_in(tmp_path, second, minilm_server) as tools:
        run_hygiene(tools.ctx, second)
    assert roots(tmp_path) == [os.path.realpath(first)]


def test_a_pass_in_another_project_keeps_this_ones_asked_roots(
    tmp_path: Path, repo: Path, minilm_server: object, git_calls: list[list[str]]
) -> None:
    """Each project is a stranger to the other's pass: remembering it as asked must not
    forget what that project, as a checkout, was asked (git again at every switch)."""
    worktree = worktree_with_commit(tmp_path, repo, minilm_server, tmp_path / "acme-feature")
    git(repo, "worktree", "remove", "--force", str(worktree))  # its branch never merged
    beta = parser_repo(tmp_path / "beta")
    with tools_in(tmp_path, beta, minilm_server) as tools:
        remember(tools, "Beta parsing")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        remember(tools, "Acme parsing")
        run_hygiene(tools.ctx, repo)
    assert "rev-list" in [call[0] for call in git_calls]
    with tools_in(tmp_path, beta, minilm_server) as tools:
        run_hygiene(tools.ctx, beta)
    git_calls.clear()
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
    assert "rev-list" not in [call[0] for call in git_calls]


def test_a_clone_at_a_former_worktrees_path_is_nobodys_to_claim(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """A worktree of acme once stood where a clone of it stands now: saving in the clone
    records it as a main checkout, so with its disk unplugged acme does not take its
    anchors (saved on the clone's code)."""
    disk = tmp_path / "usb"
    disk.mkdir()
    path = disk / "acme-p"
    git(repo, "worktree", "add", "-q", "-b", "p", str(path))
    with tools_in(tmp_path, path, minilm_server) as tools:
        remember(tools, "Worktree note")
    with tools_in(tmp_path, path, minilm_server) as tools:
        ok(tools, "memory_forget", {"label": "Worktree note"})
    git(repo, "worktree", "remove", str(path))
    git(tmp_path, "clone", "-q", str(repo), str(path))
    with tools_in(tmp_path, path, minilm_server) as tools:
        remember(tools, "Clone note")
    disk.rename(tmp_path / "usb-unplugged")
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
    assert roots(tmp_path) == [os.path.realpath(path)]


def test_a_worktree_path_reused_at_the_same_head_is_asked_about_again(
    tmp_path: Path, repo: Path, minilm_server: object
) -> None:
    """Asked about once (an abandoned branch), the path is reused by a worktree at the
    main checkout's HEAD, a memory saved there, the worktree removed: the main checkout,
    its HEAD unmoved, takes that memory's anchors."""
    path = worktree_with_commit(tmp_path, repo, minilm_server, tmp_path / "acme-wt")
    git(repo, "worktree", "remove", str(path))
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
    git(repo, "worktree", "add", "-q", "-b", "review", str(path))
    with tools_in(tmp_path, path, minilm_server) as tools:
        ok(tools, "memory_remember", {"label": "Readme", "content": "x", "anchors": ["README"]})
    git(repo, "worktree", "remove", str(path))
    with tools_in(tmp_path, repo, minilm_server) as tools:
        run_hygiene(tools.ctx, repo)
    by_slug = "SELECT slug, root FROM thatch_anchors ORDER BY slug"
    assert rows(tmp_path / "thatch.db", by_slug) == [
        ("config-parsing", os.path.realpath(path)),
        ("readme", os.path.realpath(repo)),
    ]
