"""Anchors saved in a git worktree that is gone since (docs/database.md §code-anchors): the
checkout of the same repository that recalls or checks them takes them over; another
repository's checkout never does, nor does any checkout while the worktree exists."""

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
